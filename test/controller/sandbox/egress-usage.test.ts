import t from 'tap';
import { parseEgressUsage } from '../../../controller/sandbox/egress-usage.js';

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
