/**
 * Property tests of the whole egress decision (checkTarget, checkAddresses, decide) against an
 * independent reference written here: label-wise allowlist matching on names the reference
 * validates itself, and a plain list of denied CIDRs checked with ipaddr.js. The policy's own
 * tables and fast paths are never consulted by the reference, so a shared mistake would have to
 * be made twice. Bounded runs: the file takes a few seconds.
 */
import { isIP } from 'node:net';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import t from 'tap';
import { getDomain } from 'tldts';
import { holds } from '../support/property.js';
import { buildPolicy, checkAddresses, checkTarget, decide, type LookupOutcome, type Policy } from '../../policy/index.js';

// ---- reference: host names and allowlist -------------------------------------------------------

/** The host-name rules of the README, spelled out plainly; undefined when the name must be refused. */
function refName(raw: string): string | undefined {
  // ASCII letters, digits, '-', '_', '.' before anything else: no case mapping happens on the rest.
  for (let i = 0; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    const ok = (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x5f || c === 0x2e;
    if (!ok) return undefined;
  }
  const name = (raw.endsWith('.') ? raw.slice(0, -1) : raw).toLowerCase();
  if (name.length === 0 || name.length > 253) return undefined;
  const labels = name.split('.');
  if (labels.some((l) => l.length === 0 || l.length > 63 || l.startsWith('-') || l.endsWith('-'))) return undefined;
  const last = labels[labels.length - 1]!;
  if (/^[0-9]+$/.test(last) || /^0x[0-9a-f]*$/.test(last)) return undefined; // an IP literal to some resolver
  return name;
}

interface RefList {
  readonly exact: readonly string[];
  readonly below: readonly string[][];
}

function refList(entries: readonly string[]): RefList | undefined {
  const exact: string[] = [];
  const below: string[][] = [];
  for (const raw of entries) {
    const e = raw.trim(); // buildPolicy trims entries as read from a file
    const wild = e.startsWith('*.');
    const name = refName(wild ? e.slice(2) : e);
    if (name === undefined) return undefined;
    // The Public Suffix List (both sections, implicit "*" rule) is data, not logic: the library
    // is the oracle for "is a public suffix", i.e. has no registrable domain of its own.
    if (wild && getDomain(name, { allowPrivateDomains: true }) === null) return undefined;
    if (wild) below.push(name.split('.'));
    else exact.push(name);
  }
  return { exact, below };
}

/** Label by label from the right: `*.b.c` allows `x.b.c` and `w.x.b.c`, never `b.c` or `xb.c`. */
function refAllows(list: RefList, name: string): boolean {
  if (list.exact.includes(name)) return true;
  const labels = name.split('.');
  return list.below.some((parent) => labels.length > parent.length && parent.every((l, i) => labels[labels.length - parent.length + i] === l));
}

// ---- reference: addresses ----------------------------------------------------------------------

const V4_DENIED = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24',
  '192.0.2.0/24', '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24',
  '224.0.0.0/4', '240.0.0.0/4', '168.63.129.16/32', '100.100.100.200/32',
].map((c) => ipaddr.IPv4.parseCIDR(c));
// Inside global unicast 2000::/3 (everything outside it is denied wholesale).
const V6_DENIED = ['2001:db8::/32', '2001:2::/48', '2001:10::/28', '2001:20::/28', '3fff::/20'].map((c) => ipaddr.IPv6.parseCIDR(c));

function refPublicV4(a: ipaddr.IPv4): boolean {
  return !V4_DENIED.some((r) => a.match(r));
}

function v4At(parts: readonly number[], hi: number): ipaddr.IPv4 {
  const [x = 0, y = 0] = [parts[hi], parts[hi + 1]];
  return new ipaddr.IPv4([x >> 8, x & 255, y >> 8, y & 255]);
}

function refPublic(text: string): boolean {
  // Only what inet_pton accepts (node:net agrees with it); no zone ids, no inet_aton spellings.
  if (isIP(text) === 0 || text.includes('%')) return false;
  const a = ipaddr.parse(text);
  if (a.kind() === 'ipv4') return refPublicV4(a as ipaddr.IPv4);
  const v6 = a as ipaddr.IPv6;
  const p = v6.parts;
  const inPrefix = (cidr: string): boolean => v6.match(ipaddr.IPv6.parseCIDR(cidr));
  if (inPrefix('::ffff:0:0/96') || inPrefix('::ffff:0:0:0/96') || inPrefix('64:ff9b::/96')) return refPublicV4(v4At(p, 6));
  if (inPrefix('2002::/16')) return refPublicV4(v4At(p, 1));
  if (inPrefix('2001::/32')) {
    const client = v4At(p.map((x) => ~x & 0xffff), 6);
    return refPublicV4(v4At(p, 2)) && refPublicV4(client);
  }
  if (!inPrefix('2000::/3')) return false;
  return !V6_DENIED.some((r) => v6.match(r));
}

// ---- generators --------------------------------------------------------------------------------

const ODD = [' ', '\t', '\0', '\r', '\n', '*', '%', '@', '\\', '/', ':', '[', ']', '#', '?', '+', '~', '!', '"', '\x7f'];
const UNICODE = ['\u212a', 'ⓔ', 'é', 'ı', 'İ', 'ß', 'Ｋ', '\u00ad', '\u200b', '。', 'а', '\u{1f600}'];

const asciiLabel = fc.string({ unit: fc.constantFrom(...'abcdefxyzABCXYZ019-_'), minLength: 1, maxLength: 12 });
const label = fc.oneof(
  { weight: 6, arbitrary: asciiLabel },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 99999 }).map(String) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 0xffff }).map((n) => `0x${n.toString(16)}`) },
  { weight: 1, arbitrary: fc.constantFrom('', '-a', 'a-', 'x'.repeat(63), 'x'.repeat(64), '0x', 'XN--BCHER-KVA') },
  { weight: 1, arbitrary: fc.tuple(asciiLabel, fc.constantFrom(...ODD, ...UNICODE), fc.nat(12)).map(([l, c, at]) => l.slice(0, at) + c + l.slice(at)) },
);
/** Names built from a small vocabulary, so generated names and entries often meet. */
const base = fc.constantFrom('example.com', 'Example.COM', 'wild.test', 'a.b.wild.test', 'com', 'test', 'evilexample.com');
const hostName = fc.oneof(
  fc.tuple(fc.array(label, { maxLength: 3 }), base, fc.boolean()).map(([ls, b, dot]) => [...ls, b].join('.') + (dot ? '.' : '')),
  fc.array(label, { minLength: 1, maxLength: 5 }).map((ls) => ls.join('.')),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.tuple(label, fc.nat(300)).map(([l, n]) => `${l}.`.repeat(n) + 'com'),
);
const entry = fc.oneof(
  base,
  fc.tuple(fc.constantFrom('', '*.'), fc.array(asciiLabel, { maxLength: 2 }), base).map(([w, ls, b]) => w + [...ls, b].join('.')),
  fc.tuple(fc.constantFrom('', '*.'), hostName).map(([w, h]) => w + h),
);
const allowlist = fc.array(entry, { maxLength: 6 });

/** IPv4 uniform, or at the edges of a reference range. */
const v4 = fc.oneof(
  fc.integer({ min: 0, max: 0xffffffff }),
  fc.tuple(fc.constantFrom(...V4_DENIED), fc.integer({ min: -1, max: 1 }), fc.boolean()).map(([[a, bits], d, end]) => {
    const first = a.toByteArray().reduce((x, b) => x * 256 + b, 0);
    return Math.min(0xffffffff, Math.max(0, (end ? first + 2 ** (32 - bits) - 1 : first) + d));
  }),
);
const dotted = (n: number): string => `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
const hex32 = (n: number): string => `${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
const ipv6 = fc.oneof(
  fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 }).map((p) => new ipaddr.IPv6(p).toString()),
  fc.tuple(fc.constantFrom('2001:db8:', '2001:2:', '2001:10:', '3fff:', '2606:4700:', '2a00:1450:', 'fe80:', 'fc00:', 'ff02:', '5f00:', '100:'), fc.nat(0xffff))
    .map(([p, n]) => `${p}:${n.toString(16)}`),
  fc.tuple(v4, fc.constantFrom('::ffff:D', '::ffff:H', '::D', '::ffff:0:D', '64:ff9b::H', '64:ff9b:1::H', '2002:H::1', 'T', '::FFFF:D'))
    .map(([n, form]) => (form === 'T' ? `2001:0:4136:e378:8000:63bf:${hex32(~n >>> 0)}` : form.replace('D', dotted(n)).replace('H', hex32(n)))),
);
const address = fc.oneof(
  { weight: 4, arbitrary: v4.map(dotted) },
  { weight: 4, arbitrary: ipv6 },
  { weight: 1, arbitrary: fc.constantFrom('010.0.0.1', '8.8.8.08', '0x7f.0.0.1', '2130706433', '8.8.8', 'fe80::1%eth0', '2606:4700::1%1', '', ' 8.8.8.8', '[2606:4700::1]', '::ffff:8.8.8.8:80') },
);
const addresses = fc.array(address, { minLength: 0, maxLength: 4 });
const port = fc.constantFrom(443, 80, 22, 8443, 0, 65536, -1, 1.5);

// ---- helpers -----------------------------------------------------------------------------------

function policyFor(entries: readonly string[], testHosts: Record<string, string> = {}): Policy | undefined {
  const built = buildPolicy({ allowHosts: entries, connectPorts: [443, 80], testHosts });
  return built.ok ? built.policy : undefined;
}

// ---- properties --------------------------------------------------------------------------------

t.test('parsing never throws and a policy builds exactly from the entries the reference accepts', (tt) =>
  holds(tt, fc.property(allowlist, hostName, port, (entries, host, p) => {
    const policy = policyFor(entries);
    if ((policy !== undefined) !== (refList(entries) !== undefined)) return false;
    if (policy) checkTarget(policy, host, p);
    return true;
  }), 4_000));

t.test('checkTarget allows exactly what label-wise reference matching allows, on an allowed port', (tt) =>
  holds(tt, fc.property(allowlist, hostName, port, (entries, host, p) => {
    const policy = policyFor(entries);
    const list = refList(entries);
    if (policy === undefined || list === undefined) return true;
    const got = checkTarget(policy, host, p);
    const name = refName(host);
    const want = name !== undefined && refAllows(list, name) && (p === 443 || p === 80);
    if (got.allowed !== want) return false;
    return !got.allowed || got.host === name;
  }), 6_000));

t.test('checkAddresses never allows an address the reference denies, and pins the checked answer', (tt) =>
  holds(tt, fc.property(addresses, (answer) => {
    const target = { allowed: true as const, host: 'example.com', port: 443, rule: 'example.com', tunnel: 'tls' as const };
    const got = checkAddresses(target, answer);
    if (!got.allowed) return answer.length === 0 ? got.reason === 'dns_failed' : true;
    return answer.length > 0 && answer.every(refPublic) && got.addresses.every((a) => answer.includes(a));
  }), 8_000));

// The policy also denies AS112 and AMT anycast (policy/address-ranges.ts says why); the reference
// does not, so the converse below leaves them out.
const V4_EXTRA = ['192.31.196.0/24', '192.52.193.0/24', '192.175.48.0/24'].map((c) => ipaddr.IPv4.parseCIDR(c));

t.test('IPv4: every address the reference finds public is allowed (no over-blocking)', (tt) =>
  holds(tt, fc.property(v4, (n) => {
    const s = dotted(n);
    const got = checkAddresses({ allowed: true, host: 'example.com', port: 443, rule: 'example.com', tunnel: 'tls' }, [s]);
    const extra = V4_EXTRA.some((r) => ipaddr.IPv4.parse(s).match(r));
    return got.allowed === (refPublic(s) && !extra);
  }), 4_000));

t.test('decide: an allow implies reference-allowed name, port and every address, looked up once', (tt) =>
  holds(tt, fc.asyncProperty(allowlist, hostName, port, addresses, fc.boolean(), async (entries, host, p, answer, pin) => {
    const list = refList(entries);
    const pinnedName = list?.exact[0];
    const policy = policyFor(entries, pin && pinnedName ? { [pinnedName]: '127.0.0.1' } : {});
    if (policy === undefined || list === undefined) return true;
    const asked: string[] = [];
    const lookup = async (name: string): Promise<LookupOutcome> => {
      asked.push(name);
      return { ok: true, addresses: answer };
    };
    const got = await decide(policy, host, p, lookup);
    const name = refName(host);
    const targetOk = name !== undefined && refAllows(list, name) && (p === 443 || p === 80);
    if (!targetOk && asked.length > 0) return false; // no DNS question for a refused target
    if (asked.length > 1) return false;
    if (!got.allowed) return true;
    if (!targetOk || got.host !== name) return false;
    if (got.pinnedBy === 'test_host') return pin && got.host === pinnedName && asked.length === 0;
    return asked.length === 1 && answer.length > 0 && answer.every(refPublic) && got.addresses.every((a) => answer.includes(a));
  }), 4_000));

t.test('decide never rejects, even when the lookup throws or fails', (tt) =>
  holds(tt, fc.asyncProperty(hostName, fc.constantFrom('throw', 'dns_failed', 'dns_timeout'), async (host, how) => {
    const policy = policyFor(['*.example.com', 'example.com', 'wild.test'])!;
    const got = await decide(policy, host, 443, async (): Promise<LookupOutcome> => {
      if (how === 'throw') throw new Error('resolver exploded');
      return { ok: false, reason: how as 'dns_failed' | 'dns_timeout', detail: 'test' };
    });
    return !got.allowed;
  }), 2_000));

t.test('a non-ASCII letter that lower-cases to ASCII is refused, in a request and in an entry', (tt) => {
  // U+212A KELVIN SIGN lower-cases to an ASCII "k": checking the characters after lower-casing
  // maps Unicode onto an allowed name, which the host-name rules forbid.
  const policy = policyFor(['key.example.com'])!;
  const got = checkTarget(policy, '\u212aey.example.com', 443);
  tt.equal(got.allowed, false, 'request host with U+212A is not allowed');
  if (!got.allowed) tt.equal(got.reason, 'malformed_host');
  tt.equal(buildPolicy({ allowHosts: ['*.\u212aey.com'] }).ok, false, 'an entry with U+212A is a load error');
  tt.end();
});
