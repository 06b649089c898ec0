import t from 'tap';
import { buildPolicy, compileAllowlist, decide, parseHostPattern, type HostPattern } from '../../policy/index.js';

function allowlist(entries: string[]) {
  return compileAllowlist(
    entries.map((e) => {
      const p = parseHostPattern(e);
      if (!p.ok) throw new Error(p.problem);
      return p.pattern;
    }),
  );
}

const list = allowlist(['exact.example.com', '*.wild.example.com', 'xn--bcher-kva.example', 'Mixed.Case.ORG.']);

const cases: { name: string; host: string; rule: string | undefined }[] = [
  { name: 'exact match', host: 'exact.example.com', rule: 'exact.example.com' },
  { name: 'exact entry does not match a child', host: 'a.exact.example.com', rule: undefined },
  { name: 'exact entry does not match the parent', host: 'example.com', rule: undefined },
  { name: 'wildcard matches one level down', host: 'a.wild.example.com', rule: '*.wild.example.com' },
  { name: 'wildcard matches any depth', host: 'a.b.c.wild.example.com', rule: '*.wild.example.com' },
  { name: 'wildcard does not match its apex', host: 'wild.example.com', rule: undefined },
  { name: 'suffix match is by label boundary', host: 'evilwild.example.com', rule: undefined },
  { name: 'suffix in the middle does not match', host: 'wild.example.com.evil.net', rule: undefined },
  { name: 'punycode entry', host: 'xn--bcher-kva.example', rule: 'xn--bcher-kva.example' },
  { name: 'entries are normalised', host: 'mixed.case.org', rule: 'mixed.case.org' },
  { name: 'unrelated name', host: 'evil.net', rule: undefined },
];
for (const c of cases) t.test(c.name, async (t) => t.equal(list.match(c.host)?.entry, c.rule));

const bad: { name: string; entry: string }[] = [
  { name: 'IP literal', entry: '10.0.0.1' },
  { name: 'bracketed IPv6', entry: '[::1]' },
  { name: 'bare wildcard', entry: '*' },
  { name: 'wildcard not leading', entry: 'a.*.example.com' },
  { name: 'partial-label wildcard', entry: '*foo.example.com' },
  { name: 'non-ASCII', entry: 'bücher.example' },
  { name: 'empty label', entry: 'a..b' },
  { name: 'empty', entry: '' },
  { name: 'wildcard over a TLD', entry: '*.com' },
  { name: 'wildcard over a two-label public suffix', entry: '*.co.uk' },
  { name: 'wildcard over a public suffix, trailing dot and case', entry: '*.CO.UK.' },
  { name: 'wildcard over a PSL wildcard suffix (*.kawasaki.jp)', entry: '*.b.kawasaki.jp' },
  { name: 'wildcard over a single unknown label (the PSL default rule)', entry: '*.corp' },
];
for (const c of bad) {
  t.test(`refuses entry: ${c.name}`, async (t) => {
    const p = parseHostPattern(c.entry);
    t.equal(p.ok, false);
    if (!p.ok) t.ok(p.problem.length > 0, 'says why');
  });
}

t.test('100k entries: matching stays fast (no linear scan)', async (t) => {
  const patterns: HostPattern[] = [];
  for (let i = 0; i < 50_000; i++) {
    patterns.push({ kind: 'exact', name: `host${i}.example${i % 97}.com`, entry: `host${i}.example${i % 97}.com`, tunnel: 'tls' });
    patterns.push({ kind: 'suffix', name: `zone${i}.example.net`, entry: `*.zone${i}.example.net`, tunnel: 'tls' });
  }
  const big = compileAllowlist(patterns);
  t.equal(big.size, 100_000);
  t.equal(big.match('a.b.zone49999.example.net')?.entry, '*.zone49999.example.net');
  t.equal(big.match('host123.example26.com')?.entry, 'host123.example26.com');
  t.equal(big.match('zone1.example.net'), undefined);
  const n = 200_000;
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) big.match(`x.y.zone${i % 50_000}.example.net`);
  const nsPerMatch = Number(process.hrtime.bigint() - start) / n;
  // A linear scan of 100k entries takes hundreds of microseconds per match; this bound is loose
  // on purpose (coverage instrumentation and a busy CI machine slow the loop several times).
  t.ok(nsPerMatch < 50_000, `${nsPerMatch.toFixed(0)} ns per match`);
});

t.test('a wildcard over a public suffix says which entry and why', async (t) => {
  const p = parseHostPattern('*.co.uk');
  t.equal(p.ok, false);
  if (!p.ok) t.match(p.problem, /"co\.uk" is a public suffix/);
});

// The Public Suffix List's private section: below each of these, anyone (or any customer) gets a
// name of their own and points it at their own server, so a wildcard over one reaches an attacker.
const privateSuffixes: { name: string; entry: string; suffix: string }[] = [
  { name: 'GitHub Pages', entry: '*.github.io', suffix: 'github.io' },
  { name: 'dynamic DNS', entry: '*.duckdns.org', suffix: 'duckdns.org' },
  { name: 'ngrok tunnels', entry: '*.ngrok.io', suffix: 'ngrok.io' },
  { name: 'ngrok free tunnels', entry: '*.ngrok-free.app', suffix: 'ngrok-free.app' },
  { name: 'Heroku apps', entry: '*.herokuapp.com', suffix: 'herokuapp.com' },
  { name: 'Cloudflare Workers', entry: '*.workers.dev', suffix: 'workers.dev' },
  { name: 'Blogger', entry: '*.blogspot.com', suffix: 'blogspot.com' },
  { name: 'raw GitHub user content', entry: '*.githubusercontent.com', suffix: 'githubusercontent.com' },
  { name: 'S3 buckets (two-label private suffix)', entry: '*.s3.amazonaws.com', suffix: 's3.amazonaws.com' },
  { name: 'S3 regional buckets (three-label private suffix)', entry: '*.s3.us-east-1.amazonaws.com', suffix: 's3.us-east-1.amazonaws.com' },
  { name: 'private suffix, case and trailing dot', entry: '*.GitHub.IO.', suffix: 'github.io' },
];
for (const c of privateSuffixes) {
  t.test(`refuses a wildcard over a private-section suffix: ${c.name}`, async (t) => {
    const p = parseHostPattern(c.entry);
    t.equal(p.ok, false);
    if (p.ok) return;
    const suffix = c.suffix.replace(/\./g, '\\.');
    t.match(p.problem, new RegExp(`"${suffix}" is a public suffix \\(Public Suffix List, private section`), 'names the suffix and the section');
    t.match(p.problem, new RegExp(`"\\*\\.${suffix}"`), 'names the entry');
    t.match(p.problem, new RegExp(`list the exact host names instead \\("example\\.${suffix}"\\)`), 'says what to write instead');
  });
}

const fine: { name: string; entry: string }[] = [
  { name: 'wildcard below one ICANN-registered domain', entry: '*.example.co.uk' },
  { name: 'wildcard below a PSL exception (!city.kawasaki.jp)', entry: '*.city.kawasaki.jp' },
  { name: 'an exact ICANN suffix names one host', entry: 'co.uk' },
  { name: 'an exact private suffix names one host (its operator\'s)', entry: 'github.io' },
  { name: 'an exact multi-label private suffix names one host', entry: 's3.amazonaws.com' },
  { name: 'wildcard below one name under a private suffix (one owner)', entry: '*.example.github.io' },
  { name: 'wildcard below one bucket under a multi-label private suffix', entry: '*.bucket.s3.amazonaws.com' },
  { name: 'exact name under a private suffix', entry: 'example.github.io' },
  { name: 'ordinary wildcard', entry: '*.wild.example.com' },
];
for (const c of fine) t.test(`accepts entry: ${c.name}`, async (t) => t.equal(parseHostPattern(c.entry).ok, true, c.entry));

t.test('the matched entry carries its tunnel mode; exact beats wildcard, deeper beats shallower', async (t) => {
  const patterns = [
    ['*.example.com', 'opaque'],
    ['*.tls.example.com', 'tls'],
    ['ssh.tls.example.com', 'opaque'],
  ].map(([entry, mode]) => {
    const p = parseHostPattern(entry as string, mode as 'tls' | 'opaque');
    if (!p.ok) throw new Error(p.problem);
    return p.pattern;
  });
  const list = compileAllowlist(patterns);
  t.same([list.match('a.example.com')?.tunnel, list.match('a.tls.example.com')?.tunnel, list.match('ssh.tls.example.com')?.tunnel], ['opaque', 'tls', 'opaque']);
  t.equal(parseHostPattern('a.example').ok && parseHostPattern('a.example').ok ? (parseHostPattern('a.example') as { pattern: { tunnel: string } }).pattern.tunnel : '', 'tls', 'tls by default');
});

// A wildcard above a private suffix loads (`amazonaws.com` is one company's domain), but must not
// match a name below that suffix: `bucket.s3.amazonaws.com` is whoever owns the bucket.
t.test('a wildcard does not reach across a public suffix below it', async (t) => {
  const aws = allowlist(['*.amazonaws.com', 'exact.s3.amazonaws.com', '*.mine.s3.amazonaws.com', '*.example.com']);
  const matches: [string, string | undefined][] = [
    ['sts.amazonaws.com', '*.amazonaws.com'],
    ['iam.amazonaws.com', '*.amazonaws.com'],
    // The suffix itself is its operator's own host.
    ['s3.amazonaws.com', '*.amazonaws.com'],
    ['bucket.s3.amazonaws.com', undefined],
    ['deep.bucket.s3.amazonaws.com', undefined],
    ['bucket.s3.us-east-1.amazonaws.com', undefined],
    ['ec2.us-east-1.amazonaws.com', undefined],
    // Exact entries and wildcards below the suffix are the operator's own choice of owner.
    ['exact.s3.amazonaws.com', 'exact.s3.amazonaws.com'],
    ['a.mine.s3.amazonaws.com', '*.mine.s3.amazonaws.com'],
    ['a.b.example.com', '*.example.com'],
  ];
  for (const [host, rule] of matches) t.equal(aws.match(host)?.entry, rule, host);
  t.same(aws.crossing('bucket.s3.amazonaws.com'), { entry: '*.amazonaws.com', suffix: 's3.amazonaws.com' });
  t.equal(aws.crossing('sts.amazonaws.com'), undefined, 'a name it matches crosses nothing');
  t.equal(aws.crossing('evil.net'), undefined, 'a name no wildcard is over crosses nothing');
});

t.test('the refusal of a name across a suffix says which entry, which suffix, and what to list', async (t) => {
  const built = buildPolicy({ allowHosts: ['*.amazonaws.com'] });
  if (!built.ok) throw new Error('the policy does not build');
  const { policy } = built;
  const lookup = async (): Promise<never> => {
    throw new Error('no lookup for a name the allowlist refuses');
  };
  const d = await decide(policy, 'bucket.s3.amazonaws.com', 443, lookup);
  t.match(d, { allowed: false, reason: 'host_not_allowed', detail: 'bucket.s3.amazonaws.com is below the public suffix s3.amazonaws.com, where every name has an owner of its own, so *.amazonaws.com does not reach it; list bucket.s3.amazonaws.com itself' });
});
