/**
 * The leaves the egress shows clients of inspected hosts: a real TLS handshake verifies one
 * against the deployment CA for its exact name; names that are no normalised DNS name get none;
 * the cache is capped (least recently used goes), a leaf is renewed half way through its life,
 * concurrent asks share one issuance, and a new leaf costs a few milliseconds.
 */
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import { createAuthority, isCodedError, type Authority } from '../../common/index.js';
import { DEFAULT_LEAF_LIFETIME_MS, DEFAULT_MAX_LEAVES, LeafCertificates } from '../../proxy/inspect/index.js';
import { leafNameProblem } from '../../proxy/inspect/leaf-certificates.js';
import { handshake } from '../support/tls-handshake.js';

let ca: Authority;
let other: Authority;
t.before(async () => {
  ca = await createAuthority();
  other = await createAuthority();
});

/** The handshake of a client trusting `trust` with a server that takes its leaf from `leaves` by SNI. */
function viaSni(leaves: LeafCertificates, servername: string, trust: string) {
  return handshake(
    { SNICallback: (name, cb) => void leaves.contextFor(name).then((ctx) => cb(null, ctx), (err: Error) => cb(err)) },
    { ca: trust, servername },
  );
}

t.test('a leaf passes a real handshake for its exact name, and only against the deployment CA', async (t) => {
  const leaves = new LeafCertificates(ca);
  t.equal(leaves.caCertificatePem, ca.certificatePem);
  const ok = await viaSni(leaves, 'api.example.test', ca.certificatePem);
  t.equal(ok.error, undefined, 'trusted');
  t.equal(ok.peer?.subject?.CN, 'api.example.test');
  t.equal(ok.peer?.subjectaltname, 'DNS:api.example.test', 'the one name, nothing else');
  t.equal((await viaSni(leaves, 'api.example.test', other.certificatePem)).error, 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'another CA does not vouch for it');
  // A leaf for one name presented for another fails the client's name check.
  const context = await leaves.contextFor('api.example.test');
  t.equal((await handshake({ secureContext: context }, { ca: ca.certificatePem, servername: 'other.example.test' })).error, 'ERR_TLS_CERT_ALTNAME_INVALID');
});

t.test('a leaf is a serverAuth end-entity certificate for one DNS name, from a little before now for a day', async (t) => {
  const leaves = new LeafCertificates(ca);
  const seen = await handshake({ secureContext: await leaves.contextFor('x.example.test') }, { ca: ca.certificatePem, servername: 'x.example.test' });
  t.equal(seen.error, undefined);
  const peer = new X509Certificate(seen.peer?.raw ?? Buffer.alloc(0));
  t.notOk(peer.ca, 'no CA');
  t.ok(peer.checkIssued(new X509Certificate(ca.certificatePem)), 'issued by the deployment CA');
  t.ok(peer.verify(new X509Certificate(ca.certificatePem).publicKey), 'its signature is the CA key\'s');
  t.match(peer.issuer, /CN=capybara-egress deployment CA [0-9a-f]{8}/);
  t.equal(peer.subject, 'CN=x.example.test');
  t.same(peer.keyUsage, ['1.3.6.1.5.5.7.3.1'], 'extendedKeyUsage serverAuth only');
  t.equal(peer.subjectAltName, 'DNS:x.example.test');
  const from = Date.parse(peer.validFrom);
  const to = Date.parse(peer.validTo);
  t.ok(from < Date.now() - 30 * 60_000, 'backdated');
  t.ok(Math.abs(to - Date.now() - DEFAULT_LEAF_LIFETIME_MS) < 120_000, 'a day');
});

t.test('a name longer than a commonName holds is in the subjectAltName alone', async (t) => {
  const long = `${'a'.repeat(60)}.${'b'.repeat(60)}.example.test`;
  const leaves = new LeafCertificates(ca);
  const ok = await viaSni(leaves, long, ca.certificatePem);
  t.equal(ok.error, undefined);
  t.equal(ok.peer?.subjectaltname, `DNS:${long}`);
  t.same(ok.peer?.subject, {}, 'an empty subject');
});

t.test('a validity past 2049 is written as GeneralizedTime, and read back the same', async (t) => {
  const late = Date.parse('2051-06-01T00:00:00Z');
  const far = await createAuthority({ now: new Date(late - 86_400_000) });
  const leaves = new LeafCertificates(far, { now: () => late });
  const seen = await handshake({ secureContext: await leaves.contextFor('far.test') }, { ca: far.certificatePem, servername: 'far.test' });
  // The client's clock is today's: the leaf is not yet valid, and says so (its dates were read).
  t.equal(seen.error, 'CERT_NOT_YET_VALID');
});

t.test('only a normalised DNS name gets a leaf: no IP, no wildcard, no upper case, no trailing dot', async (t) => {
  const leaves = new LeafCertificates(ca);
  const refused: Array<[string, string]> = [
    ['an IPv4 address', '127.0.0.1'],
    ['an inet_aton spelling', '0x7f.1'],
    ['a bracketed IPv6 address', '[::1]'],
    ['a wildcard', '*.example.test'],
    ['upper case', 'API.example.test'],
    ['a trailing dot', 'api.example.test.'],
    ['empty', ''],
    ['a space', 'a b.test'],
    ['non-ASCII', 'exämple.test'],
    ['a NUL', 'a\0.test'],
    ['a comma (two names in one)', 'a.test,b.test'],
    ['an empty label', 'a..test'],
    ['too long', `${'a.'.repeat(127)}test`],
  ];
  for (const [name, host] of refused) {
    t.ok(leafNameProblem(host), `${name}: a problem`);
    await t.rejects(leaves.contextFor(host), { code: 'leaf_name_invalid' }, name);
  }
  t.equal(leaves.issuedCount, 0, 'nothing was signed');
  t.equal(leafNameProblem('under_score.example.test'), undefined, 'an underscore is a name the policy allows');
});

t.test('the cache holds at most maxLeaves, and the least recently used goes first', async (t) => {
  const leaves = new LeafCertificates(ca, { maxLeaves: 3 });
  const a = await leaves.contextFor('a.test');
  await leaves.contextFor('b.test');
  await leaves.contextFor('c.test');
  t.equal(await leaves.contextFor('a.test'), a, 'a hit is the same context');
  t.equal(leaves.issuedCount, 3);
  await leaves.contextFor('d.test');
  t.equal(leaves.size, 3, 'capped');
  t.equal(await leaves.contextFor('a.test'), a, 'a was used recently, so it stayed');
  t.equal(leaves.issuedCount, 4, 'no new leaf for a');
  await leaves.contextFor('b.test');
  t.equal(leaves.issuedCount, 5, 'b was the least recently used and was evicted');
  t.equal(leaves.size, 3);
  t.throws(() => new LeafCertificates(ca, { maxLeaves: 0 }), RangeError);
  const byDefault = new LeafCertificates(ca);
  for (let i = 0; i <= DEFAULT_MAX_LEAVES; i++) await byDefault.contextFor(`d${i}.test`);
  t.equal(DEFAULT_MAX_LEAVES, 256);
  t.equal(byDefault.size, DEFAULT_MAX_LEAVES, 'the default cap holds');
  t.throws(() => new LeafCertificates(ca, { lifetimeMs: 5 }), RangeError);
});

t.test('a leaf is renewed once half its life has passed, and never outlives the CA', async (t) => {
  let clock = Date.now();
  const leaves = new LeafCertificates(ca, { lifetimeMs: 3_600_000, now: () => clock });
  const first = await leaves.contextFor('renew.test');
  clock += 29 * 60_000;
  t.equal(await leaves.contextFor('renew.test'), first, 'before half its life: the same leaf');
  clock += 2 * 60_000;
  const second = await leaves.contextFor('renew.test');
  t.not(second, first, 'after half its life: a new leaf');
  t.equal(leaves.issuedCount, 2);
  t.equal(leaves.size, 1, 'the renewal replaced the old one');

  // A CA with a few days left (ten years less 3,649 days, leap days included): a leaf asked a
  // week-long life ends with the CA.
  const ending = await createAuthority({ now: new Date(Date.now() - 3_649 * 86_400_000) });
  t.ok(ending.notAfter.getTime() - Date.now() < 7 * 86_400_000, 'the CA ends within the week');
  const capped = new LeafCertificates(ending, { lifetimeMs: 7 * 86_400_000 });
  const ok = await viaSni(capped, 'end.test', ending.certificatePem);
  t.equal(ok.error, undefined);
  t.ok(Date.parse(ok.peer?.valid_to ?? '') <= ending.notAfter.getTime(), 'the leaf ends no later than the CA');
  // Past the CA's end, no leaf at all.
  const late = new LeafCertificates(ending, { now: () => ending.notAfter.getTime() + 1000 });
  await t.rejects(late.contextFor('late.test'), { code: 'ca_invalid', message: /has expired.*--rotate/ });
});

t.test('concurrent asks for one name share one issuance', async (t) => {
  const leaves = new LeafCertificates(ca);
  const contexts = await Promise.all(Array.from({ length: 20 }, () => leaves.contextFor('same.test')));
  t.equal(new Set(contexts).size, 1, 'one context');
  t.equal(leaves.issuedCount, 1, 'one signature');
  const many = await Promise.all(['p.test', 'q.test', 'p.test', 'q.test'].map((h) => leaves.contextFor(h)));
  t.equal(many[0], many[2]);
  t.equal(many[1], many[3]);
  t.equal(leaves.issuedCount, 3);
  t.ok(isCodedError(await leaves.contextFor('IP').catch((e: unknown) => e), 'CodedError'), 'a refusal is a CodedError');
});

t.test('a new leaf costs under 5 ms (ECDSA P-256; the median, against a loaded machine\'s pauses)', async (t) => {
  const leaves = new LeafCertificates(ca, { maxLeaves: 10_000 });
  await leaves.contextFor('warm.test');
  const times: number[] = [];
  for (let i = 0; i < 200; i++) {
    const started = performance.now();
    await leaves.contextFor(`n${i}.cost.test`);
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  const median = times[100] ?? Infinity;
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  t.comment(`a new leaf: median ${median.toFixed(2)} ms, mean ${mean.toFixed(2)} ms, p99 ${(times[198] ?? 0).toFixed(2)} ms (200 leaves)`);
  t.ok(median < 5, `median ${median.toFixed(2)} ms`);
  t.equal(leaves.issuedCount, 201, 'each one a new leaf');
});
