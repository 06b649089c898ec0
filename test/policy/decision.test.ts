/**
 * An open connection checked again when its policy changes (recheckTarget): it is kept exactly
 * when a new connection of its kind to the same target would be allowed as it runs, so a tunnel is
 * checked as a tunnel (an entry with rules allows none) and in its mode (an opaque tunnel is
 * not a tls one). And a request inside an inspected connection pinned to the addresses that
 * connection checked (repinTarget): checked again, never looked up.
 */
import t from 'tap';
import { buildPolicy, checkTarget, recheckTarget, repinTarget, type AllowEntry, type OpenTarget, type Policy } from '../../policy/index.js';

function policyOf(allowHosts: AllowEntry[], testHosts: Record<string, string> = {}): Policy {
  const built = buildPolicy({ allowHosts, tunnelDefault: 'opaque', connectPorts: [443, 80], testHosts });
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  return built.policy;
}

const tunnel = (mode: 'tls' | 'opaque'): OpenTarget => ({ kind: 'tunnel', host: 'a.example', port: 443, mode });
const http: OpenTarget = { kind: 'http', host: 'a.example', port: 80 };

const ROWS: ReadonlyArray<{ name: string; open: OpenTarget; now: AllowEntry[]; outcome: string }> = [
  { name: 'a tunnel whose entry is unchanged', open: tunnel('opaque'), now: ['a.example'], outcome: 'allowed' },
  { name: 'a tunnel whose host is dropped', open: tunnel('tls'), now: ['b.example'], outcome: 'host_not_allowed' },
  { name: 'a tunnel whose entry gains method rules', open: tunnel('tls'), now: [{ host: 'a.example', methods: ['GET'] }], outcome: 'tunnel_not_allowed' },
  { name: 'a tunnel whose entry gains path rules', open: tunnel('opaque'), now: [{ host: 'a.example', paths: ['/x'] }], outcome: 'tunnel_not_allowed' },
  { name: 'an opaque tunnel whose entry becomes tls: its hello was never checked', open: tunnel('opaque'), now: [{ host: 'a.example', tunnel: 'tls' }], outcome: 'policy_revoked' },
  { name: 'a tls tunnel whose entry becomes opaque: it was checked more than a new one is', open: tunnel('tls'), now: [{ host: 'a.example', tunnel: 'opaque' }], outcome: 'allowed' },
  { name: 'a plain-HTTP connection whose entry gains rules: each request is checked by them', open: http, now: [{ host: 'a.example', methods: ['GET'] }], outcome: 'allowed' },
  { name: 'a plain-HTTP connection whose host is dropped', open: http, now: ['b.example'], outcome: 'host_not_allowed' },
];

t.test('recheckTarget keeps what a new connection of the same kind would be allowed, and nothing else', async (t) => {
  for (const row of ROWS) {
    const got = recheckTarget(policyOf(row.now), row.open);
    t.equal(got.allowed ? 'allowed' : got.reason, row.outcome, row.name);
  }
});

t.test("repinTarget checks the connection's addresses again, and prefers a test host as a lookup would", async (t) => {
  const plain = policyOf(['a.example']);
  const target = checkTarget(plain, 'a.example', 443);
  if (!target.allowed) throw new Error(target.detail);
  t.match(repinTarget(plain, target, ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c']), { allowed: true, addresses: ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'], pinnedBy: 'connection' });
  t.match(repinTarget(plain, target, ['93.184.215.14', '10.0.0.1']), { allowed: false, reason: 'address_not_allowed' }, 'one private address refuses, as in a lookup');
  t.match(repinTarget(plain, target, []), { allowed: false, reason: 'dns_failed' }, 'no address, no request');
  t.match(repinTarget(plain, target, ['93.184.215.14'], (address, port) => address === '93.184.215.14' && port === 443), { allowed: false, reason: 'address_not_allowed' }, "the proxy's own listener");
  t.match(repinTarget(policyOf(['a.example'], { 'a.example': '127.0.0.1' }), target, ['93.184.215.14']), { allowed: true, addresses: ['127.0.0.1'], pinnedBy: 'test_host' });
  // A connection a test host pinned, whose test host a reload removed: its address is checked now.
  t.match(repinTarget(plain, target, ['127.0.0.1']), { allowed: false, reason: 'address_not_allowed' });
});
