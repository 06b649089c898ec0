/**
 * The lines one sandbox of a shared proxy can make it write, past its decision lines: a
 * connection that closes with pipelined requests never started writes a `requests_dropped` line.
 * Before a review that line had no cap: a sandbox sending two requests per connection, the first
 * refused (which closes the connection), wrote one per connection, at its whole connection rate
 * (200 a second), four times its allowed lines' rate and more than the shard's refusal lines
 * together. Now it goes through the sandbox's refusal-line cap, and what is held back is counted
 * on the `decision_lines_suppressed` summary.
 */
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createLogger } from '../../proxy/index.js';
import { REFUSAL_LINES } from '../../proxy/record/decisions.js';
import { rawRequest } from '../support/raw-client.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { captureLogs } from '../support/log-capture.js';
import { settle } from '../support/settle.js';

const A = { subnet: '127.0.1.0/28', proxy: '127.0.1.1', client: '127.0.1.5' };
const B = { subnet: '127.0.2.0/28', proxy: '127.0.2.1', client: '127.0.2.5' };

t.test('a sandbox dropping pipelined requests on every connection writes within its refusal-line cap', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tenant-lines-'));
  const { logs, sink } = captureLogs();
  const { proxy, port } = await startSharedProxy(t, dir, createLogger('info', sink), { testHosts: { 'a.test': '127.0.0.1' }, rate: { perSecond: 10_000, burst: 10_000 } });
  for (const [slot, net] of [['slot-a', A], ['slot-b', B]] as const) {
    putSlot(dir, slot, { version: 1, sandbox: `cap-${slot.slice(-1)}`, lifecycle: `life-${slot.slice(-1)}-0001`, subnet: net.subnet, address: net.proxy, policy: { allowHosts: ['a.test'], connectPorts: [80] } });
  }
  await settle(() => logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const { clientBurst, clientPerSecond } = REFUSAL_LINES;
  // Each connection: a refused request (it closes the connection) and one pipelined behind it.
  const twice = 'GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n'.repeat(2);
  const connections = clientBurst + 100;
  const started = performance.now();
  for (let i = 0; i < connections; i += 1) {
    const r = await rawRequest(port, twice, A.proxy, 5_000, A.client);
    r.socket.destroy();
  }
  const linesOf = (sandbox: string): Record<string, unknown>[] => logs.filter((l) => l.sandbox === sandbox && (l.event === 'decision' || l.event === 'requests_dropped'));
  await settle(() => logs.filter((l) => l.event === 'requests_dropped').length > 0, 'a dropped line');
  const seconds = (performance.now() - started) / 1_000;
  const most = clientBurst + Math.ceil(clientPerSecond * seconds) + 1;
  t.ok(linesOf('cap-a').length <= most, `sandbox A wrote ${linesOf('cap-a').length} lines for ${connections} connections in ${seconds.toFixed(1)} s: at most its refusal lines' burst and rate (${most})`);
  const b = await rawRequest(port, twice, B.proxy, 5_000, B.client);
  b.socket.destroy();
  await settle(() => linesOf('cap-b').some((l) => l.event === 'requests_dropped'), 'another sandbox\'s dropped line');
  await proxy.close();
  const summary = logs.find((l) => l.event === 'decision_lines_suppressed');
  t.ok(summary !== undefined && Number((summary.byReason as Record<string, number>).requests_dropped) > 0, 'the dropped lines held back are counted on the summary');
});
