/**
 * An open connection checked again when its policy changes (recheckTarget): it is kept exactly
 * when a new connection of its kind to the same target would be allowed as it runs, so a tunnel is
 * checked as a tunnel (an entry with rules allows none) and in its mode (an opaque tunnel is
 * not a tls one).
 */
import t from 'tap';
import { buildPolicy, recheckTarget, type AllowEntry, type OpenTarget, type Policy } from '../../policy/index.js';

function policyOf(allowHosts: AllowEntry[]): Policy {
  const built = buildPolicy({ allowHosts, tunnelDefault: 'opaque', connectPorts: [443, 80] });
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
