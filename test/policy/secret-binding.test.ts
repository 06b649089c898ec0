/**
 * `secrets:` on allowHosts entries (policy/secret-binding.ts, buildPolicy): how a policy file
 * writes them, that the matched target carries the bindings (names and sources, never values),
 * and every way to write them wrong, each refused with the entry's path and what to do.
 */
import t from 'tap';
import { buildPolicy, checkTarget, parsePolicyText, type AllowEntry, type PolicyInput } from '../../policy/index.js';

function problemsOf(input: PolicyInput): { path: string; message: string }[] {
  const built = buildPolicy(input);
  return built.ok ? [] : [...built.problems];
}

t.test('a policy file binds secrets to an inspected exact entry; the target carries the bindings', async (t) => {
  const text = [
    'allowHosts:',
    '  - host: api.github.com',
    '    inspect: true',
    '    secrets:',
    '      - { name: GITHUB_TOKEN, header: Authorization, format: "Bearer {}" }',
    '      - { name: OTHER, env: OTHER_REAL }',
    '      - { name: FROM_FILE, header: X-Api-Key, file: /run/secrets/key }',
    '  - example.org',
  ].join('\n');
  const file = parsePolicyText(text, 'p.yaml');
  const built = buildPolicy({ allowHosts: file.allowHosts });
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  const target = checkTarget(built.policy, 'API.GitHub.com', 443);
  if (!target.allowed) throw new Error(target.detail);
  t.same(target.secrets, [
    { name: 'GITHUB_TOKEN', header: 'Authorization', format: 'Bearer {}', source: { kind: 'env', variable: 'GITHUB_TOKEN' } },
    { name: 'OTHER', header: undefined, format: '{}', source: { kind: 'env', variable: 'OTHER_REAL' } },
    { name: 'FROM_FILE', header: 'X-Api-Key', format: '{}', source: { kind: 'file', path: '/run/secrets/key' } },
  ]);
  t.same(built.policy.secretBindings.map((b) => [b.path, b.host, b.binding.name]), [
    ['allowHosts[0].secrets[0]', 'api.github.com', 'GITHUB_TOKEN'],
    ['allowHosts[0].secrets[1]', 'api.github.com', 'OTHER'],
    ['allowHosts[0].secrets[2]', 'api.github.com', 'FROM_FILE'],
  ]);
  const plain = checkTarget(built.policy, 'example.org', 443);
  t.equal(plain.allowed && plain.secrets, undefined, 'an entry without secrets binds none');
});

t.test('an unknown key in a secret is refused by the schema, with its path', async (t) => {
  t.throws(() => parsePolicyText('allowHosts:\n  - host: a.example\n    inspect: true\n    secrets: [{ name: A, value: "x" }]\n', 'p.yaml'), /allowHosts\[0\]\.secrets\[0\]/);
});

const INSPECTED = (secrets: unknown[], extra: Record<string, unknown> = {}): AllowEntry => ({ host: 'api.example', inspect: true, secrets, ...extra }) as AllowEntry;

const BAD: { name: string; allowHosts: AllowEntry[]; path: string; says: RegExp }[] = [
  { name: 'not inspected', allowHosts: [{ host: 'api.example', secrets: [{ name: 'A', header: 'X-A' }] }], path: 'allowHosts[0].secrets', says: /inspect: true.*see inside TLS.*in clear/ },
  { name: 'wildcard entry', allowHosts: [{ host: '*.api.example', inspect: true, secrets: [{ name: 'A', header: 'X-A' }] }], path: 'allowHosts[0].secrets', says: /a secret binds to exact names/ },
  { name: 'lower-case name', allowHosts: [INSPECTED([{ name: 'gh_token' }])], path: 'allowHosts[0].secrets[0]', says: /upper case/ },
  { name: 'name starting with a digit', allowHosts: [INSPECTED([{ name: '1A' }])], path: 'allowHosts[0].secrets[0]', says: /upper case/ },
  { name: 'empty name', allowHosts: [INSPECTED([{ name: '' }])], path: 'allowHosts[0].secrets[0]', says: /upper case/ },
  { name: 'header not a token', allowHosts: [INSPECTED([{ name: 'A', header: 'X A' }])], path: 'allowHosts[0].secrets[0]', says: /not an HTTP field name/ },
  ...['Host', 'content-length', 'Transfer-Encoding', 'Connection', 'Upgrade', 'TE', 'Trailer', 'Keep-Alive', 'Proxy-Authorization', 'proxy-x'].map((h) => ({
    name: `header ${h}`,
    allowHosts: [INSPECTED([{ name: 'A', header: h }])],
    path: 'allowHosts[0].secrets[0]',
    says: /frames or routes the request, or is hop-by-hop/,
  })),
  { name: 'format without {}', allowHosts: [INSPECTED([{ name: 'A', header: 'X-A', format: 'Bearer' }])], path: 'allowHosts[0].secrets[0]', says: /exactly once/ },
  { name: 'format with two {}', allowHosts: [INSPECTED([{ name: 'A', header: 'X-A', format: '{}{}' }])], path: 'allowHosts[0].secrets[0]', says: /exactly once/ },
  { name: 'format with CR LF', allowHosts: [INSPECTED([{ name: 'A', header: 'X-A', format: 'Bearer {}\r\nX-Evil: 1' }])], path: 'allowHosts[0].secrets[0]', says: /printable ASCII/ },
  { name: 'format with non-ASCII', allowHosts: [INSPECTED([{ name: 'A', header: 'X-A', format: 'Bé {}' }])], path: 'allowHosts[0].secrets[0]', says: /printable ASCII/ },
  { name: 'format without header', allowHosts: [INSPECTED([{ name: 'A', format: 'Bearer {}' }])], path: 'allowHosts[0].secrets[0]', says: /format but no header/ },
  { name: 'env and file', allowHosts: [INSPECTED([{ name: 'A', env: 'B', file: '/x' }])], path: 'allowHosts[0].secrets[0]', says: /env or file, not both/ },
  { name: 'relative file', allowHosts: [INSPECTED([{ name: 'A', file: 'secrets/a' }])], path: 'allowHosts[0].secrets[0]', says: /absolute path/ },
  { name: 'env not a variable name', allowHosts: [INSPECTED([{ name: 'A', env: 'A-B' }])], path: 'allowHosts[0].secrets[0]', says: /not an environment variable name/ },
  { name: 'name twice in one entry', allowHosts: [INSPECTED([{ name: 'A', header: 'X-A' }, { name: 'A', header: 'X-B' }])], path: 'allowHosts[0].secrets[1]', says: /listed twice/ },
  { name: 'one header set by two secrets', allowHosts: [INSPECTED([{ name: 'A', header: 'X-A' }, { name: 'B', header: 'x-a' }])], path: 'allowHosts[0].secrets[1]', says: /one header carries one secret/ },
  {
    name: 'one name, two sources',
    allowHosts: [INSPECTED([{ name: 'A', header: 'X-A' }]), { host: 'b.example', inspect: true, secrets: [{ name: 'A', header: 'X-A', env: 'OTHER' }] }],
    path: 'allowHosts[1].secrets[0]',
    says: /another place than at allowHosts\[0\]\.secrets\[0\]/,
  },
  {
    name: 'entry listed again, one with secrets',
    allowHosts: [INSPECTED([{ name: 'A', header: 'X-A' }]), { host: 'api.example', inspect: true }],
    path: 'allowHosts[1]',
    says: /listed again, and one of the two has secrets/,
  },
];

for (const row of BAD) {
  t.test(`refused: ${row.name}`, async (t) => {
    const problems = problemsOf({ allowHosts: row.allowHosts });
    t.equal(problems.length, 1, JSON.stringify(problems));
    t.equal(problems[0]?.path, row.path);
    t.match(problems[0]?.message ?? '', row.says);
  });
}

t.test('one name bound to several entries with one source is fine', async (t) => {
  const built = buildPolicy({ allowHosts: [INSPECTED([{ name: 'A', header: 'X-A' }]), { host: 'b.example', inspect: true, secrets: [{ name: 'A', header: 'Authorization', format: 'token {}' }] }] });
  t.ok(built.ok);
});
