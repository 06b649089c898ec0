import t from 'tap';
import { parseEgressUsage } from '../../../controller/sandbox/egress-usage.js';
import { IMAGES } from '../../../common/index.js';
import { isSandboxError } from '../../../controller/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

t.test('sums bytes and decisions from the proxy metrics', async (t) => {
  const text = [
    '# HELP egress_bytes_total Bytes relayed',
    '# TYPE egress_bytes_total counter',
    'egress_bytes_total{direction="up",kind="tunnel"} 120',
    'egress_bytes_total{direction="down",kind="tunnel"} 5000',
    'egress_bytes_total{direction="up",kind="http"} 30',
    'egress_bytes_total{direction="down",kind="http"} 1e3',
    'egress_decisions_total{outcome="allow",reason="allowed"} 4',
    'egress_decisions_total{outcome="deny",reason="host_not_allowed"} 2',
    'egress_decisions_total{outcome="deny",reason="ip_literal"} 1',
    'egress_open_tunnels 1',
    'egress_dns_seconds_bucket{le="0.001",outcome="ok"} 3',
  ].join('\n');
  t.same(parseEgressUsage(text), {
    bytesUp: 150,
    bytesDown: 6000,
    allowed: 4,
    denied: 3,
    deniedByReason: { host_not_allowed: 2, ip_literal: 1 },
    openTunnels: 1,
  });
});

t.test('empty or foreign text gives zeros', async (t) => {
  t.same(parseEgressUsage('garbage\n{}\n'), { bytesUp: 0, bytesDown: 0, allowed: 0, denied: 0, deniedByReason: {}, openTunnels: 0 });
});

t.test('on a shard: the series of that sandbox alone, never the process totals or another sandbox', async (t) => {
  const text = [
    'egress_bytes_total{direction="up",kind="tunnel"} 9999',
    'egress_decisions_total{outcome="allow",reason="allowed"} 99',
    'egress_open_tunnels 9',
    'egress_sandbox_decisions_total{sandbox="cap-a",outcome="allow"} 3',
    'egress_sandbox_decisions_total{sandbox="cap-a",outcome="deny"} 2',
    'egress_sandbox_decisions_total{sandbox="cap-ab",outcome="deny"} 7',
    'egress_sandbox_denials_total{sandbox="cap-a",reason="host_not_allowed"} 2',
    'egress_sandbox_denials_total{sandbox="cap-ab",reason="ip_literal"} 7',
    'egress_sandbox_bytes_total{sandbox="cap-a",direction="up"} 40',
    'egress_sandbox_bytes_total{sandbox="cap-a",direction="down"} 900',
    'egress_sandbox_bytes_total{sandbox="cap-ab",direction="down"} 5',
    'egress_sandbox_open_tunnels{sandbox="cap-a"} 1',
    'egress_sandbox_open_tunnels{sandbox="cap-ab"} 4',
  ].join('\n');
  t.same(parseEgressUsage(text, 'cap-a'), { bytesUp: 40, bytesDown: 900, allowed: 3, denied: 2, deniedByReason: { host_not_allowed: 2 }, openTunnels: 1 });
  t.same(parseEgressUsage(text, 'cap-b'), { bytesUp: 0, bytesDown: 0, allowed: 0, denied: 0, deniedByReason: {}, openTunnels: 0 }, 'a sandbox with no series: zeros');
});

/**
 * The metrics are read by an exec in the egress container, as the proxy's own user: a proxy taken
 * over by what it serves can print without end, or never end. The controller serves every
 * sandbox (a shard's, every tenant's), so it holds a bounded amount and waits a bounded time.
 */
t.test('egressUsage holds a bounded amount of the metrics exec output, and waits a bounded time', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'usage-flood', image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'] } });
  const normal = s.engine.onExec;
  const metrics = (request: { cmd: readonly string[] }): boolean => request.cmd[0] === 'node';

  s.engine.onExec = (container, request) => {
    if (!metrics(request)) return normal(container, request);
    // 32 MiB of series-shaped lines, in the 1 MiB reads dockerd would frame them in.
    const chunk = Buffer.from('egress_open_tunnels 1\n'.repeat(Math.floor(1024 * 1024 / 22)));
    for (let i = 0; i < 32; i++) request.onOutput('stdout', chunk);
    return { exitCode: 0 };
  };
  const flooded = await s.provider.egressUsage(h).then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(flooded, 'engine_error'), `refused: ${String(flooded)}`);
  t.match((flooded as Error).message, /over 16777216 bytes/);

  s.engine.onExec = (container, request) => (metrics(request) ? new Promise(() => undefined) : normal(container, request));
  const started = Date.now();
  const stuck = await s.provider.egressUsage(h).then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(stuck, 'engine_error'), `given up: ${String(stuck)}`);
  t.match((stuck as Error).message, /did not finish within 30 s/);
  t.ok(Date.now() - started < 35_000, `settled in ${Date.now() - started} ms`);
});
