/**
 * Report mode, decided: what only the allowlist or the ports refuse is allowed with the refusal
 * enforce mode would give (wouldDeny); every other refusal stays, in both modes. A table of each
 * reason, then a property that compares the two modes on the same input.
 */
import fc from 'fast-check';
import t from 'tap';
import { holds } from '../support/property.js';
import { buildPolicy, checkTarget, decide, parsePolicyText, type LookupOutcome, type Policy, type PolicyInput } from '../../policy/index.js';

function policyOf(input: PolicyInput): Policy {
  const built = buildPolicy(input);
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  return built.policy;
}

const base: PolicyInput = { allowHosts: ['allowed.example', '*.wild.example', { host: 'ssh.example', tunnel: 'opaque' }], connectPorts: [443, 80] };
const report = policyOf({ ...base, mode: 'report' });
const enforce = policyOf(base);
const lookupOf = (addresses: readonly string[]) => async (): Promise<LookupOutcome> => ({ ok: true, addresses });

t.test('the policy file: mode defaults to enforce, takes report, refuses anything else', async (t) => {
  t.equal(parsePolicyText('allowHosts: [a.example]\n', 'p.yaml').mode, undefined, 'unset in the file');
  t.equal(parsePolicyText('allowHosts: []\nmode: enforce\n', 'p.yaml').mode, 'enforce');
  t.equal(parsePolicyText('allowHosts: []\nmode: report\n', 'p.yaml').mode, 'report');
  t.throws(() => parsePolicyText('allowHosts: []\nmode: log\n', 'p.yaml'), { code: 'invalid_policy', message: /mode/ });
  t.throws(() => parsePolicyText('allowHosts: []\nmode: Report\n', 'p.yaml'), { code: 'invalid_policy' }, 'no case folding: a typo fails closed');
  t.equal(enforce.mode, 'enforce', 'buildPolicy defaults to enforce');
});

interface Row {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  readonly addresses?: readonly string[];
  /** What enforce mode decides: allowed, or the refusal's reason. */
  readonly enforce: string;
  /** What report mode decides: allowed (with wouldDeny), or the refusal's reason. */
  readonly report: string;
  readonly wouldDeny?: string;
}

const PUBLIC = ['93.184.216.34'];
const ROWS: readonly Row[] = [
  { name: 'a listed host', host: 'allowed.example', port: 443, enforce: 'allowed', report: 'allowed' },
  { name: 'a host off the allowlist', host: 'unlisted.example', port: 443, enforce: 'host_not_allowed', report: 'allowed', wouldDeny: 'host_not_allowed' },
  { name: 'a listed host on a port off connectPorts', host: 'allowed.example', port: 8443, enforce: 'port_not_allowed', report: 'allowed', wouldDeny: 'port_not_allowed' },
  { name: 'both: the host is the reason enforce gives first', host: 'unlisted.example', port: 22, enforce: 'host_not_allowed', report: 'allowed', wouldDeny: 'host_not_allowed' },
  { name: 'the parent of a wildcard entry', host: 'wild.example', port: 443, enforce: 'host_not_allowed', report: 'allowed', wouldDeny: 'host_not_allowed' },
  { name: 'an IPv4 literal', host: '93.184.216.34', port: 443, enforce: 'ip_literal', report: 'ip_literal' },
  { name: 'an IPv6 literal', host: '[2606:2800:220:1::1]', port: 443, enforce: 'ip_literal', report: 'ip_literal' },
  { name: 'a numeric last label (an IP to some resolvers)', host: 'example.0x7f', port: 443, enforce: 'ip_literal', report: 'ip_literal' },
  { name: 'a malformed host', host: 'bad_host..example', port: 443, enforce: 'malformed_host', report: 'malformed_host' },
  { name: 'userinfo in the host', host: 'user@unlisted.example', port: 443, enforce: 'malformed_host', report: 'malformed_host' },
  { name: 'an unlisted host resolving to loopback', host: 'unlisted.example', port: 443, addresses: ['127.0.0.1'], enforce: 'host_not_allowed', report: 'address_not_allowed' },
  { name: 'an unlisted host resolving to a private address', host: 'unlisted.example', port: 443, addresses: ['10.0.0.5'], enforce: 'host_not_allowed', report: 'address_not_allowed' },
  { name: 'an unlisted host resolving to metadata', host: 'unlisted.example', port: 80, addresses: ['169.254.169.254'], enforce: 'host_not_allowed', report: 'address_not_allowed' },
  { name: 'an unlisted host with one private answer among public ones', host: 'unlisted.example', port: 443, addresses: ['93.184.216.34', '192.168.1.1'], enforce: 'host_not_allowed', report: 'address_not_allowed' },
  { name: 'an unlisted host resolving to an IPv4-mapped private address', host: 'unlisted.example', port: 443, addresses: ['::ffff:10.0.0.1'], enforce: 'host_not_allowed', report: 'address_not_allowed' },
  { name: 'a listed host resolving to a private address', host: 'allowed.example', port: 443, addresses: ['10.1.2.3'], enforce: 'address_not_allowed', report: 'address_not_allowed' },
  { name: 'an unlisted host with no address', host: 'unlisted.example', port: 443, addresses: [], enforce: 'host_not_allowed', report: 'dns_failed' },
];

for (const row of ROWS) {
  t.test(row.name, async (t) => {
    const lookup = lookupOf(row.addresses ?? PUBLIC);
    const outcome = (d: { allowed: boolean; reason?: string }): string => (d.allowed ? 'allowed' : (d.reason ?? ''));
    const inEnforce = await decide(enforce, row.host, row.port, lookup);
    t.equal(outcome(inEnforce), row.enforce, 'enforce mode');
    t.equal(inEnforce.allowed && inEnforce.wouldDeny, inEnforce.allowed ? undefined : false, 'enforce mode never marks would_deny');
    const inReport = await decide(report, row.host, row.port, lookup);
    t.equal(outcome(inReport), row.report, 'report mode');
    if (inReport.allowed) {
      t.equal(inReport.wouldDeny?.reason, row.wouldDeny, 'the refusal enforce mode would give');
      if (row.wouldDeny !== undefined) t.equal(row.wouldDeny, row.enforce, 'would_deny is exactly the enforce reason');
      t.same(inReport.addresses, row.addresses ?? PUBLIC, 'pinned to the checked addresses');
    }
  });
}

t.test('a host allowed only by report mode: no rule, the default tunnel mode (SNI still checked)', async (t) => {
  const got = checkTarget(report, 'unlisted.example', 443);
  t.ok(got.allowed);
  if (!got.allowed) return;
  t.equal(got.rule, undefined, 'no entry matched');
  t.equal(got.tunnel, 'tls', 'the tunnel default: a TLS hello naming the host must come first');
  t.equal(got.wouldDeny?.detail, 'unlisted.example is not on the allowlist');
  const opaqueDefault = policyOf({ ...base, mode: 'report', tunnelDefault: 'opaque' });
  const opaque = checkTarget(opaqueDefault, 'unlisted.example', 443);
  t.equal(opaque.allowed && opaque.tunnel, 'opaque', 'follows --tunnel-default');
  const listed = checkTarget(report, 'ssh.example', 22);
  t.ok(listed.allowed && listed.rule === 'ssh.example' && listed.tunnel === 'opaque' && listed.wouldDeny?.reason === 'port_not_allowed', 'a listed entry keeps its rule and mode');
});

t.test('a test pin (CAPYBARA_EGRESS_TEST_HOSTS, tests only) pins an unlisted name in report mode as a listed one; unpinned names are checked', async (t) => {
  const pinned = policyOf({ ...base, mode: 'report', testHosts: { 'pinned.example': '127.0.0.1' } });
  const got = await decide(pinned, 'pinned.example', 443, lookupOf(PUBLIC));
  t.ok(got.allowed && got.pinnedBy === 'test_host' && got.wouldDeny?.reason === 'host_not_allowed');
  const unlisted = await decide(pinned, 'unlisted.example', 443, lookupOf(['127.0.0.1']));
  t.equal(unlisted.allowed ? 'allowed' : unlisted.reason, 'address_not_allowed', 'an unpinned name is checked');
});

// Same host, port and answer in both modes: report mode differs from enforce only where enforce
// refuses for the allowlist or the port, and then only by allowing with that reason marked.
const label = fc.stringMatching(/^[a-z0-9_-]{1,8}$/);
const rawHost = fc.oneof(
  fc.array(label, { minLength: 1, maxLength: 4 }).map((l) => l.join('.')),
  fc.constantFrom('allowed.example', 'a.wild.example', 'wild.example', '10.0.0.1', '[::1]', 'x..y', 'a.b.0x10', 'ssh.example'),
  fc.string({ maxLength: 20 }),
);
const answer = fc.array(fc.constantFrom('93.184.216.34', '10.0.0.1', '127.0.0.1', '2606:2800:220:1::1', 'fe80::1', '100.64.0.1', '::ffff:192.168.0.1'), { maxLength: 3 });

t.test('property: report mode allows exactly what enforce allows, plus what enforce refuses only for the allowlist or the port', (tt) =>
  holds(
    tt,
    fc.asyncProperty(rawHost, fc.constantFrom(443, 80, 22, 8443), answer, async (host, port, addresses) => {
      const lookup = lookupOf(addresses);
      const e = await decide(enforce, host, port, lookup);
      const r = await decide(report, host, port, lookup);
      if (e.allowed) return r.allowed && r.wouldDeny === undefined && r.host === e.host;
      if (e.reason !== 'host_not_allowed' && e.reason !== 'port_not_allowed') return !r.allowed && r.reason === e.reason;
      // Negotiable in report mode, but the addresses are still checked.
      if (!r.allowed) return r.reason === 'address_not_allowed' || r.reason === 'dns_failed';
      return r.wouldDeny?.reason === e.reason && r.addresses.length > 0;
    }),
    6_000,
  ),
);
