import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parsePolicyText, parseSlotFile, PolicyError, buildPolicy } from '../../policy/index.js';
import { readStrictText } from '../../policy/policy-file.js';

t.test('reads YAML and JSON with defaults', async (t) => {
  t.same(parsePolicyText('allowHosts: [a.example]\n', 'p.yaml'), { version: 1, allowHosts: ['a.example'], connectPorts: [443, 80] });
  t.same(parsePolicyText('{"version":1,"allowHosts":["a.example"],"connectPorts":[8443]}', 'p.json'), {
    version: 1,
    allowHosts: ['a.example'],
    connectPorts: [8443],
  });
});

const bad: { name: string; text: string; path: string }[] = [
  { name: 'unknown key', text: 'allowHosts: []\nallowhosts: [x]\n', path: '(top level)' },
  { name: 'missing allowHosts', text: 'version: 1\n', path: 'allowHosts' },
  { name: 'wrong version', text: 'version: 2\nallowHosts: []\n', path: 'version' },
  { name: 'port out of range', text: 'allowHosts: []\nconnectPorts: [70000]\n', path: 'connectPorts[0]' },
  { name: 'port not a number', text: 'allowHosts: []\nconnectPorts: ["443"]\n', path: 'connectPorts[0]' },
  { name: 'no ports', text: 'allowHosts: []\nconnectPorts: []\n', path: 'connectPorts' },
  { name: 'host not a string', text: 'allowHosts: [1]\n', path: 'allowHosts[0]' },
  { name: 'duplicate key', text: 'allowHosts: [a.example]\nallowHosts: [b.example]\n', path: 'line 2' },
  { name: 'not YAML', text: 'allowHosts: [a\n', path: 'line' },
];
for (const c of bad) {
  t.test(`error names file, path and problem: ${c.name}`, async (t) => {
    const err = t.throws(() => parsePolicyText(c.text, '/etc/egress/policy.yaml')) as PolicyError;
    t.type(err, PolicyError);
    t.equal(err.code, 'invalid_policy');
    t.match(err.message, '/etc/egress/policy.yaml');
    t.match(err.message, c.path);
  });
}

t.test('a %YAML 1.1 directive is refused: its merge keys would give a key twice, one value dropped unsaid', async (t) => {
  // Under YAML 1.1 "<<" merges a mapping into its parent; two of them name methods twice, and the
  // reader keeps one without a word, where a key written twice is an error.
  const merged = '%YAML 1.1\n---\nallowHosts:\n  - <<: {host: api.example.com, methods: [GET]}\n    <<: {methods: [POST, DELETE]}\n';
  const err = t.throws(() => parsePolicyText(merged, 'p.yaml')) as PolicyError;
  t.type(err, PolicyError);
  t.match(err.message, /line 1, column 1: .*YAML 1\.2/);
  // The slot files of a shared proxy are read the same way.
  t.throws(() => readStrictText('%YAML 1.1\n---\n<<: {mode: report}\nallowHosts: [a.example]\n', 'slot.json'), PolicyError);
  // An explicit 1.2 directive is what the reader assumes anyway.
  t.same(parsePolicyText('%YAML 1.2\n---\nallowHosts: [a.example]\n', 'p.yaml').allowHosts, ['a.example']);
});

t.test('a merge key tagged !!merge is refused in YAML 1.2 too: the reader merges it all the same, one value dropped unsaid', async (t) => {
  // The reader resolves an explicit !!merge tag (in any spelling of it) under YAML 1.2 as well:
  // the entry below would read as a.example alone, its host b.example dropped without a word.
  for (const [name, text] of [
    ['!!merge', 'allowHosts:\n  - host: a.example\n    !!merge <<: {host: b.example}\n'],
    ['verbatim tag', 'allowHosts:\n  - host: a.example\n    !<tag:yaml.org,2002:merge> <<: {host: b.example}\n'],
    ['%TAG handle', '%TAG !y! tag:yaml.org,2002:\n---\nallowHosts:\n  - host: a.example\n    !y!merge <<: {host: b.example}\n'],
  ] as const) {
    const err = t.throws(() => parsePolicyText(text, 'p.yaml'), name) as PolicyError;
    t.type(err, PolicyError, name);
    t.match(err.message, /merge key/, name);
  }
  // A shared proxy's slot files are read the same way.
  t.throws(() => readStrictText('mode: enforce\n!!merge <<: {mode: report}\nallowHosts: [a.example]\n', 'slot.json'), PolicyError);
});

t.test('a document of many keys is read in time linear in its size: a reload must not stall the proxy', async (t) => {
  // The YAML reader's own duplicate-key check compares each key with every earlier one of its
  // map: 60,000 keys (650 KB) held the event loop for over three minutes, every connection waiting.
  const keys = Array.from({ length: 40_000 }, (_, i) => `k${i}: 1`);
  for (const [name, text] of [
    ['flow', `allowHosts: [a.example]\nx: {${keys.join(', ')}}\n`],
    ['block', `allowHosts: [a.example]\nx:\n  ${keys.join('\n  ')}\n`],
  ] as const) {
    const started = Date.now();
    t.throws(() => parsePolicyText(text, 'p.yaml'), PolicyError, name);
    t.ok(Date.now() - started < 10_000, `${name}: refused in ${Date.now() - started} ms`);
  }
  // A key given twice is still refused, where it is, in a nested map and at the top.
  const nested = t.throws(() => parsePolicyText('allowHosts:\n  - host: a.example\n    methods: [GET]\n    methods: [POST]\n', 'p.yaml')) as PolicyError;
  t.match(nested.message, /line 4, column 5: duplicate key "methods", given before at line 3, column 5/);
  t.throws(() => parsePolicyText('{"allowHosts": ["a.example"], "mode": "enforce", "mode": "report"}', 'p.json'), PolicyError);
});

t.test('bad allowlist entries name the entry and why', async (t) => {
  const built = buildPolicy({ allowHosts: ['good.example', '10.0.0.1', 'a..b'] });
  t.equal(built.ok, false);
  if (built.ok) return;
  t.same(
    built.problems.map((p) => p.path),
    ['allowHosts[1]', 'allowHosts[2]'],
  );
  t.match(built.problems[0]?.message, /10\.0\.0\.1.*IP literal/);
});

t.test('a URL, a host:port or a host/path in allowHosts says to write the host name alone', async (t) => {
  const built = buildPolicy({ allowHosts: ['x.example:8443', 'http://y.example:80/a', 'z.example/path', '*.w.example:443'] });
  t.equal(built.ok, false);
  if (built.ok) return;
  t.same(built.problems.map((p) => p.message), [
    '"x.example:8443": host names only; ports go in connectPorts: write "x.example"',
    '"http://y.example:80/a": host names only, without a scheme, port or path: write "y.example" (ports go in connectPorts)',
    '"z.example/path": host names only, without a path: write "z.example"',
    '"*.w.example:443": host names only; ports go in connectPorts: write "*.w.example"',
  ]);
});

t.test('test hosts are validated', async (t) => {
  const built = buildPolicy({ allowHosts: ['a.example'], testHosts: { 'a.example': 'not-an-ip' } });
  t.equal(built.ok, false);
  const ok = buildPolicy({ allowHosts: ['a.example'], testHosts: { 'A.Example.': ['127.0.0.1', '::1'] } });
  t.ok(ok.ok);
  if (ok.ok) t.same(ok.policy.testHosts.get('a.example'), ['127.0.0.1', '::1']);
});

t.test('allowHosts entries may be objects with a tunnel mode', async (t) => {
  const file = parsePolicyText('allowHosts:\n  - a.example\n  - { host: ssh.example, tunnel: opaque }\n  - { host: "*.b.example", tunnel: tls }\n  - { host: c.example }\n', 'p.yaml');
  const built = buildPolicy({ allowHosts: file.allowHosts });
  t.ok(built.ok);
  if (!built.ok) return;
  const mode = (name: string) => built.policy.allowlist.match(name)?.tunnel;
  t.same([mode('a.example'), mode('ssh.example'), mode('x.b.example'), mode('c.example')], ['tls', 'opaque', 'tls', 'tls']);
});

t.test('tunnel modes: a default for unmarked entries, and an operator switch that refuses opaque', async (t) => {
  const opaqueByDefault = buildPolicy({ allowHosts: ['a.example', { host: 'b.example', tunnel: 'tls' }], tunnelDefault: 'opaque' });
  t.ok(opaqueByDefault.ok);
  if (opaqueByDefault.ok) t.same([opaqueByDefault.policy.allowlist.match('a.example')?.tunnel, opaqueByDefault.policy.allowlist.match('b.example')?.tunnel], ['opaque', 'tls']);
  const strict = buildPolicy({ allowHosts: ['a.example', { host: 'ssh.example', tunnel: 'opaque' }], requireTls: true });
  t.equal(strict.ok, false);
  if (!strict.ok) {
    t.equal(strict.problems[0]?.path, 'allowHosts[1]');
    t.match(strict.problems[0]?.message, /opaque tunnel is refused/);
  }
});

const badEntries: { name: string; text: string; path: string; message: RegExp }[] = [
  { name: 'unknown tunnel mode', text: 'allowHosts:\n  - { host: a.example, tunnel: ssh }\n', path: 'allowHosts[0]', message: /./ },
  { name: 'unknown key in an entry', text: 'allowHosts:\n  - { host: a.example, mode: opaque }\n', path: 'allowHosts[0]', message: /./ },
  { name: 'entry without host', text: 'allowHosts:\n  - { tunnel: opaque }\n', path: 'allowHosts[0]', message: /./ },
];
for (const c of badEntries) {
  t.test(`bad object entry: ${c.name}`, async (t) => {
    const err = t.throws(() => parsePolicyText(c.text, 'p.yaml')) as PolicyError;
    t.equal(err.code, 'invalid_policy');
    t.match(err.message, c.path);
  });
}

t.test('the same entry twice with different tunnel modes is refused', async (t) => {
  const built = buildPolicy({ allowHosts: [{ host: 'a.example', tunnel: 'opaque' }, 'A.example.'] });
  t.equal(built.ok, false);
  if (!built.ok) t.match(built.problems[0], { path: 'allowHosts[1]', message: /listed again with tunnel tls/ });
});

t.test('a wildcard over a private-section public suffix is a load error naming the entry, the suffix and the fix', async (t) => {
  const built = buildPolicy({ allowHosts: ['good.example', '*.example.github.io', '*.github.io', { host: '*.s3.amazonaws.com', tunnel: 'opaque' }] });
  t.equal(built.ok, false);
  if (!built.ok) {
    t.same(built.problems.map((p) => p.path), ['allowHosts[2]', 'allowHosts[3]']);
    t.match(built.problems[0]?.message, /^"\*\.github\.io": "github\.io" is a public suffix \(Public Suffix List, private section.*list the exact host names instead \("example\.github\.io"\)/);
    t.match(built.problems[1]?.message, /^"\*\.s3\.amazonaws\.com": "s3\.amazonaws\.com" is a public suffix/);
  }
});

t.test('a wildcard over a public suffix is a load error naming the entry', async (t) => {
  const built = buildPolicy({ allowHosts: ['good.example', '*.com', '*.co.uk'] });
  t.equal(built.ok, false);
  if (!built.ok) {
    t.same(built.problems.map((p) => p.path), ['allowHosts[1]', 'allowHosts[2]']);
    t.match(built.problems[1]?.message, /"\*\.co\.uk".*public suffix/);
  }
});

// The policies the repository ships (npm start's default, the egress image example) and the
// README's example must load: a rule that tightens (such as the private-section suffixes) must
// not leave them refusing to start.
t.test('every policy the repository ships, and the README example, loads', async (t) => {
  const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
  const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
  const example = /### Policy files\n\n```yaml\n([\s\S]*?)```/.exec(readme)?.[1];
  t.ok(example, 'the README has a policy example');
  const envExample = /EGRESS_ALLOW_HOSTS='([^']*)' capybara-egress/.exec(readme)?.[1];
  t.ok(envExample, 'the README has an EGRESS_ALLOW_HOSTS example');
  const policies: [string, string][] = [
    ['policy/default-policy.yaml', readFileSync(path.join(root, 'policy', 'default-policy.yaml'), 'utf8')],
    ['deploy/egress/policy/policy.yaml', readFileSync(path.join(root, 'deploy', 'egress', 'policy', 'policy.yaml'), 'utf8')],
    ['README policy example', example ?? ''],
  ];
  for (const [name, text] of policies) {
    const built = buildPolicy(parsePolicyText(text, name));
    t.ok(built.ok, `${name} loads${built.ok ? '' : `: ${JSON.stringify(built.problems)}`}`);
  }
  const fromEnv = buildPolicy({ allowHosts: (envExample ?? '').split(',') });
  t.ok(fromEnv.ok, `the README's EGRESS_ALLOW_HOSTS example loads${fromEnv.ok ? '' : `: ${JSON.stringify(fromEnv.problems)}`}`);
});

// Test pins skip DNS and every address check (policy/decision.ts): a file that could set them
// would let its writer (a registration is any socket-proxy caller's) pin an allowed name to the
// metadata service. SECURITY.md: they come from the proxy's own environment, never a policy file.
t.test('testHosts is refused in a policy file and in a registration\'s policy', async (t) => {
  for (const [name, text] of [
    ['YAML', 'allowHosts: [a.example]\ntestHosts:\n  a.example: 169.254.169.254\n'],
    ['JSON', '{"allowHosts":["a.example"],"testHosts":{"a.example":"169.254.169.254"}}'],
  ] as const) {
    const err = t.throws(() => parsePolicyText(text, 'p.yaml'), name) as PolicyError;
    t.type(err, PolicyError, name);
    t.match(err.message, /testHosts|Unrecognized/, `${name}: the key is named`);
  }
  const registration = JSON.stringify({ version: 1, sandbox: 'cap-a', lifecycle: '0f3c9a7e-1', subnet: '10.200.0.0/28', address: '10.200.0.14', policy: { allowHosts: ['a.example'], testHosts: { 'a.example': '169.254.169.254' } } });
  t.throws(() => parseSlotFile(registration, 'slot-1.json'), PolicyError, 'a registration');
});
