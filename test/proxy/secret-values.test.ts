/**
 * Loading secrets with the policy (proxy/secrets/secret-values.ts): values from the egress's
 * environment or a file, placeholders from EGRESS_PLACEHOLDER_<NAME>, and every way a load fails,
 * each naming the binding and the variable or file and never the value or the placeholder.
 */
import fc from 'fast-check';
import t from 'tap';
import { holds } from '../support/property.js';
import { buildPolicy, PolicyError, type AllowEntry, type Policy } from '../../policy/index.js';
import { fingerprint, loadSecrets } from '../../proxy/secrets/index.js';

function policy(allowHosts: AllowEntry[]): Policy {
  const built = buildPolicy({ allowHosts });
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  return built.policy;
}

const GH = policy([
  'example.org',
  { host: 'api.github.com', inspect: true, secrets: [{ name: 'GITHUB_TOKEN', header: 'Authorization', format: 'Bearer {}' }] },
  { host: 'github.com', inspect: true, secrets: [{ name: 'GITHUB_TOKEN' }] },
]);
const VALUE = 'ghp_realRealRealRealRealRealRealReal0001';
const PLACEHOLDER = 'ghp_placeholderPlaceholderPlaceholder0';
const noFile = (path: string): never => {
  throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' });
};

t.test('values from the environment, placeholders from EGRESS_PLACEHOLDER_<NAME>, fingerprints', async (t) => {
  const loaded = loadSecrets(GH, { GITHUB_TOKEN: VALUE, EGRESS_PLACEHOLDER_GITHUB_TOKEN: PLACEHOLDER }, noFile);
  const secret = loaded.secrets?.byName.get('GITHUB_TOKEN');
  t.same(secret, { name: 'GITHUB_TOKEN', value: VALUE, placeholder: PLACEHOLDER, fingerprint: fingerprint(VALUE) });
  t.match(secret?.fingerprint, /^sha256:[0-9a-f]{12}$/);
  t.equal(loaded.secrets?.longestPlaceholder, PLACEHOLDER.length);
  t.equal(loaded.allowHosts, GH.allowHosts, 'the rest of the policy is the same');
  t.ok(Object.isFrozen(loaded));
});

t.test('a file holds the value; one trailing newline is dropped', async (t) => {
  const p = policy([{ host: 'a.example', inspect: true, secrets: [{ name: 'KEY', header: 'X-Key', file: '/run/secrets/key' }] }]);
  const loaded = loadSecrets(p, {}, (path) => (path === '/run/secrets/key' ? 'sk-file-value\n' : noFile(path)));
  t.equal(loaded.secrets?.byName.get('KEY')?.value, 'sk-file-value');
  t.equal(loaded.secrets?.byName.get('KEY')?.placeholder, undefined, 'a header-only secret needs no placeholder');
});

t.test('a policy without secrets is returned as it is', async (t) => {
  const p = policy(['example.org']);
  t.equal(loadSecrets(p, {}, noFile), p);
});

const BAD: { name: string; policy?: Policy; env: Record<string, string>; file?: string; path: string; says: RegExp }[] = [
  { name: 'variable not set', env: { EGRESS_PLACEHOLDER_GITHUB_TOKEN: PLACEHOLDER }, path: 'allowHosts[1].secrets[0]', says: /GITHUB_TOKEN: the variable GITHUB_TOKEN is not set/ },
  { name: 'empty value', env: { GITHUB_TOKEN: '', EGRESS_PLACEHOLDER_GITHUB_TOKEN: PLACEHOLDER }, path: 'allowHosts[1].secrets[0]', says: /is empty/ },
  { name: 'value with a line break', env: { GITHUB_TOKEN: `${VALUE}\r\nX-Evil: 1`, EGRESS_PLACEHOLDER_GITHUB_TOKEN: PLACEHOLDER }, path: 'allowHosts[1].secrets[0]', says: /control character/ },
  { name: 'value with NUL', env: { GITHUB_TOKEN: `${VALUE}\0`, EGRESS_PLACEHOLDER_GITHUB_TOKEN: PLACEHOLDER }, path: 'allowHosts[1].secrets[0]', says: /control character/ },
  { name: 'placeholder with control characters', env: { GITHUB_TOKEN: VALUE, EGRESS_PLACEHOLDER_GITHUB_TOKEN: `${PLACEHOLDER}\n` }, path: 'allowHosts[1].secrets[0]', says: /EGRESS_PLACEHOLDER_GITHUB_TOKEN holds a control character/ },
  { name: 'short placeholder', env: { GITHUB_TOKEN: VALUE, EGRESS_PLACEHOLDER_GITHUB_TOKEN: 'ghp_short' }, path: 'allowHosts[1].secrets[0]', says: /shorter than 16/ },
  { name: 'placeholder equal to the value', env: { GITHUB_TOKEN: VALUE, EGRESS_PLACEHOLDER_GITHUB_TOKEN: VALUE }, path: 'allowHosts[1].secrets[0]', says: /the sandbox would hold the secret/ },
  { name: 'placeholder holding the value', env: { GITHUB_TOKEN: VALUE, EGRESS_PLACEHOLDER_GITHUB_TOKEN: `x${VALUE}` }, path: 'allowHosts[1].secrets[0]', says: /the sandbox would hold the secret/ },
  { name: 'no header and no placeholder', env: { GITHUB_TOKEN: VALUE }, path: 'allowHosts[2].secrets[0]', says: /no header and EGRESS_PLACEHOLDER_GITHUB_TOKEN is not set.*could never be sent/ },
  {
    name: 'file missing',
    policy: policy([{ host: 'a.example', inspect: true, secrets: [{ name: 'KEY', header: 'X-Key', file: '/run/secrets/gone' }] }]),
    env: {},
    path: 'allowHosts[0].secrets[0]',
    says: /cannot read the file \/run\/secrets\/gone \(ENOENT\)/,
  },
  {
    name: 'placeholders that contain one another',
    policy: policy([{ host: 'a.example', inspect: true, secrets: [{ name: 'A' }, { name: 'B' }] }]),
    env: { A: 'value-a-aaaaaa', B: 'value-b-bbbbbb', EGRESS_PLACEHOLDER_A: 'placeholder-of-a-and-more', EGRESS_PLACEHOLDER_B: 'placeholder-of-a' },
    path: 'allowHosts[0].secrets[0]',
    says: /A: its placeholder contains that of B/,
  },
];

for (const row of BAD) {
  t.test(`refused: ${row.name}`, async (t) => {
    let caught: unknown;
    try {
      loadSecrets(row.policy ?? GH, row.env, noFile, 'policy.yaml');
    } catch (err) {
      caught = err;
    }
    if (!(caught instanceof PolicyError)) return t.fail(`not a PolicyError: ${String(caught)}`);
    t.equal(caught.source, 'policy.yaml');
    t.equal(caught.problems[0]?.path, row.path, caught.message);
    t.match(caught.problems[0]?.message, row.says);
    for (const v of Object.values(row.env)) if (v.length >= 8) t.notOk(caught.message.includes(v), 'no value or placeholder in the error');
  });
}

t.test('property: a load error never holds the value or the placeholder', async (t) => {
  const text = fc.string({ minLength: 8, maxLength: 40 });
  await holds(
    t,
    fc.property(text, text, (value, placeholder) => {
      try {
        loadSecrets(GH, { GITHUB_TOKEN: value, EGRESS_PLACEHOLDER_GITHUB_TOKEN: placeholder }, noFile);
        return true;
      } catch (err) {
        const message = (err as Error).message;
        return !message.includes(value) && !message.includes(placeholder);
      }
    }),
    500,
  );
});
