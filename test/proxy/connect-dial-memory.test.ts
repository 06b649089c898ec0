/**
 * What a CONNECT's client sent after its head is held while the host is decided and dialled: the
 * read it came in is charged to the connection's memory from the head on, not only at the tunnel.
 * It was held on the accept's 4 KiB floor alone for as long as a slow upstream took to answer (a
 * connect timeout per address), up to 64 KiB more per CONNECT than the budget counted.
 */
import net from 'node:net';
import t from 'tap';
import { ACCEPT_BYTES, MemoryBudget } from '../../proxy/index.js';
import { heldDials } from '../support/held-dials.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

const KIB = 1024;
/** 127.0.0.9 stands for an upstream that never answers: the hook's socket is never connected. */
const SILENT = '127.0.0.9';
const held = heldDials(SILENT);
const HEAD = 'CONNECT silent.test:443 HTTP/1.1\r\nHost: silent.test:443\r\n\r\n';

async function proxyWith(budget: MemoryBudget) {
  const p = await startTestProxy({
    policy: { allowHosts: ['silent.test'], connectPorts: [443], testHosts: { 'silent.test': SILENT } },
    limits: { connectTimeoutMs: 120_000 },
    connect: held.connect,
    memory: budget,
  });
  t.teardown(() => p.close());
  return p;
}

function sendFrom(port: number, localAddress: string, bytes: Buffer): net.Socket {
  const s = net.connect({ port, host: '127.0.0.1', localAddress });
  s.on('error', () => undefined);
  s.write(bytes);
  return s;
}

t.teardown(() => held.destroy());

t.test('the bytes sent after a CONNECT head are charged while its dial is pending', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 64 * 1024 * KIB, perClientBytes: 16 * 1024 * KIB });
  const p = await proxyWith(budget);
  const client = '127.0.0.21';
  const before = held.sockets.length;
  const s = sendFrom(p.port, client, Buffer.concat([Buffer.from(HEAD), Buffer.alloc(48 * KIB, 0x41)]));
  await settle(() => held.sockets.length > before, 'the dial to start');
  await settle(() => budget.usedBy(client) >= ACCEPT_BYTES + 16 * KIB, `the head's read to be charged (charged ${budget.usedBy(client)})`);
  t.ok(budget.usedBy(client) <= ACCEPT_BYTES + 48 * KIB, 'no more than was sent after the head');
  s.resetAndDestroy();
  await settle(() => budget.usedBy(client) === 0, 'the charge to go with the client');
  t.ok(held.sockets.at(-1)!.destroyed, 'the dial given up with its client');
});

t.test('a CONNECT whose head came with more than the client has room for is refused overloaded, not dialled', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 64 * 1024 * KIB, perClientBytes: ACCEPT_BYTES + 8 * KIB });
  const p = await proxyWith(budget);
  const before = held.sockets.length;
  const s = sendFrom(p.port, '127.0.0.22', Buffer.concat([Buffer.from(HEAD), Buffer.alloc(32 * KIB, 0x41)]));
  let answer = '';
  s.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
  await settle(() => answer.includes('\r\n\r\n'), 'the refusal');
  t.match(answer, /^HTTP\/1\.1 503 /);
  t.match(answer, /\r\nX-Egress-Reason: overloaded\r\n/);
  t.equal(held.sockets.length, before, 'nothing dialled');
  s.destroy();
  await settle(() => budget.used === 0, 'the budget to empty');
});
