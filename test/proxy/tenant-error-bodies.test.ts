/**
 * What a shared proxy's refusals tell one sandbox about the others: nothing. A sandbox can drive
 * itself past its own shares at will and read the refusal, so a refusal body that counted what
 * every sandbox together holds would let it watch the other sandboxes' traffic, sample by sample.
 */
import t, { type Test } from 'tap';
import net from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../proxy/index.js';
import { ACCEPT_BYTES, MemoryBudget } from '../../proxy/budget/index.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { rawRequest } from '../support/raw-client.js';
import { captureLogs } from '../support/log-capture.js';
import { settle } from '../support/settle.js';

const A = { subnet: '127.0.5.0/28', proxy: '127.0.5.1', client: '127.0.5.5' };
const B = { subnet: '127.0.6.0/28', proxy: '127.0.6.1', client: '127.0.6.5' };

/** An idle connection the proxy admitted (charged its first read's floor), open until the test ends. */
async function idle(t: Test, port: number, from: { proxy: string; client: string }): Promise<void> {
  const socket = net.connect({ host: from.proxy, port, localAddress: from.client });
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  await new Promise((resolve) => socket.once('connect', resolve));
}

t.test('an overloaded refusal says nothing of what the other sandboxes hold', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tenant-bodies-'));
  for (const [slot, s] of [['a', A], ['b', B]] as const) {
    putSlot(dir, slot, { version: 1, sandbox: `cap-${slot}`, lifecycle: `life-${slot}-0001`, subnet: s.subnet, address: s.proxy, policy: { allowHosts: ['a.test'] } });
  }
  const { sink } = captureLogs();
  // Each sandbox may hold two first reads; the proxy, far more.
  const memory = new MemoryBudget({ totalBytes: 64 * ACCEPT_BYTES, perClientBytes: 2 * ACCEPT_BYTES });
  const { port } = await startSharedProxy(t, dir, createLogger('debug', sink), { memory, limits: { maxConnections: 64, maxConnectionsPerClient: 16 } });

  // A fills its own share, then asks once more: refused, and the body is what A reads.
  const refusedBody = async (): Promise<string> => {
    const r = await rawRequest(port, 'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n', A.proxy, 5_000, A.client);
    r.socket.destroy();
    t.equal(r.reason, 'overloaded');
    return r.body;
  };
  await idle(t, port, A);
  await idle(t, port, A);
  await settle(() => memory.usedBy('cap-a') === 2 * ACCEPT_BYTES, 'A holding its share');
  const quiet = await refusedBody();

  // B holds bytes of its own meanwhile: A's refusal must read the same.
  for (let i = 0; i < 2; i++) await idle(t, port, B);
  await settle(() => memory.usedBy('cap-b') === 2 * ACCEPT_BYTES, 'B holding its share');
  const busy = await refusedBody();
  t.equal(busy, quiet, 'the body does not change with what another sandbox holds');
  t.notMatch(busy, /all clients/);
});
