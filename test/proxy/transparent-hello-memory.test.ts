/**
 * What a ClientHello still arriving on the transparent TLS listener holds is what the memory
 * budget charges for it: the bytes are held once, in the hello reader, and its buffer is charged.
 * (They were held twice, the reads kept beside the reader's copy, and charged once: 200 half-sent
 * 32 KiB hellos held 1.8 times their charge.)
 */
import net from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import t from 'tap';
import { ACCEPT_BYTES, MemoryBudget } from '../../proxy/index.js';
import { listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';
import { halfHello } from '../support/tls-hello.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const KIB = 1024;

t.test('200 half-sent 32 KiB hellos hold about what the budget charges for them', async (t) => {
  const echo = net.createServer((s) => s.destroy());
  const echoPort = await listen(echo);
  const budget = new MemoryBudget({ totalBytes: 256 * 1024 * KIB, perClientBytes: 64 * 1024 * KIB });
  const p = await startTestProxy({
    policy: { allowHosts: ['tls.test'], connectPorts: [echoPort], testHosts: { 'tls.test': '127.0.0.1' } },
    limits: { maxConnections: 1_000, maxConnectionsPerClient: 1_000, headerTimeoutMs: 60_000, helloTimeoutMs: 60_000 },
    memory: budget,
  });
  const T = '127.0.0.2';
  const listening = await p.proxy.listenTransparent({ listen: T, answer: T, ports: [{ kind: 'tls', dialled: echoPort, listen: 0 }] });
  const port = listening.ports[0]!.listen;
  const client = '127.0.0.7';
  const N = 200;
  const half = halfHello();
  const sockets: net.Socket[] = [];
  t.teardown(async () => {
    for (const s of sockets) s.destroy();
    await p.close();
    echo.close();
  });
  gc();
  const base = process.memoryUsage().arrayBuffers;
  for (let i = 0; i < N; i++) {
    const s = net.connect({ port, host: T, localAddress: client });
    s.on('error', () => undefined);
    s.write(half);
    sockets.push(s);
  }
  await settle(() => budget.usedBy(client) >= N * (ACCEPT_BYTES + half.length), 'every hello charged', 20_000);
  await new Promise((r) => setTimeout(r, 200));
  gc();
  gc();
  const held = process.memoryUsage().arrayBuffers - base;
  const charged = budget.usedBy(client);
  t.ok(held <= charged * 1.25, `the proxy holds ${(held / 1048576).toFixed(1)} MiB of buffers for ${N} pending hellos; the budget charges ${(charged / 1048576).toFixed(1)} MiB (ratio ${(held / charged).toFixed(2)})`);
});
