/**
 * The pure secret transform (policy/secrets.ts): a bound secret goes into its header inside an
 * inspected connection only, replacing every copy the sandbox sent; a bound placeholder is
 * swapped, in Basic credentials too; any placeholder anywhere else (another host, the URL, plain
 * HTTP, a header name) is refused secret_wrong_host, and no refusal ever holds a value or a
 * placeholder (property tests).
 */
import fc from 'fast-check';
import t from 'tap';
import { holds } from '../support/property.js';
import { applySecrets, buildPolicy, checkRequest, checkTarget, createSecretSet, screenTarget, type AllowedTarget, type LoadedSecret } from '../../policy/index.js';

const TOKEN: LoadedSecret = { name: 'GITHUB_TOKEN', value: 'ghp_REALrealREALrealREALrealREALreal1234', placeholder: 'ghp_PLACEHOLDERplaceholderPLACEHOLDER00', fingerprint: 'sha256:0123456789ab' };
const NPM: LoadedSecret = { name: 'NPM_TOKEN', value: 'npm_realNPMrealNPMrealNPMrealNPMreal99', placeholder: 'npm_placeholderNPMplaceholderNPM000000', fingerprint: 'sha256:abcdefabcdef' };
const HEADER_ONLY: LoadedSecret = { name: 'API_KEY', value: 'sk-real-api-key-value', placeholder: undefined, fingerprint: 'sha256:999999999999' };
const SET = createSecretSet([TOKEN, NPM, HEADER_ONLY]);

const built = buildPolicy({
  allowHosts: [
    { host: 'api.github.com', inspect: true, secrets: [{ name: 'GITHUB_TOKEN', header: 'Authorization', format: 'Bearer {}' }] },
    { host: 'github.com', inspect: true, secrets: [{ name: 'GITHUB_TOKEN' }] },
    { host: 'models.example', inspect: true, secrets: [{ name: 'API_KEY', header: 'X-Api-Key' }] },
    'gist.example',
  ],
});
if (!built.ok) throw new Error(JSON.stringify(built.problems));
const policy = built.policy;
function target(host: string): AllowedTarget {
  const checked = checkTarget(policy, host, 443);
  if (!checked.allowed) throw new Error(checked.detail);
  return checked;
}
const b64 = (s: string): string => Buffer.from(s, 'latin1').toString('base64');

t.test('the bound header is set, every sandbox copy of it dropped, any case', async (t) => {
  const out = applySecrets(SET, target('api.github.com'), {
    target: '/user',
    headers: ['Accept', '*/*', 'authorization', 'Bearer sandbox-own', 'AUTHORIZATION', 'x'],
    inspected: true,
  });
  t.same(out, {
    ok: true,
    headers: ['Accept', '*/*', 'Authorization', `Bearer ${TOKEN.value}`],
    screened: ['Accept', '*/*', 'Authorization', '(secret)'],
    injected: ['GITHUB_TOKEN sha256:0123456789ab'],
  });
});

t.test('a value with $& in it is put in literally', async (t) => {
  const odd = createSecretSet([{ ...HEADER_ONLY, value: "a$&b$'c$`d$$e" }]);
  const out = applySecrets(odd, target('models.example'), { target: '/', headers: [], inspected: true });
  t.same(out.ok && out.headers, ['X-Api-Key', "a$&b$'c$`d$$e"]);
});

t.test('a Connection option naming the set header is dropped, so the header survives', async (t) => {
  const out = applySecrets(SET, target('models.example'), { target: '/', headers: ['Connection', 'keep-alive, X-Api-Key', 'X-Api-Key', 'mine'], inspected: true });
  t.same(out.ok && out.headers, ['Connection', 'keep-alive', 'X-Api-Key', HEADER_ONLY.value]);
});

t.test('a bound placeholder is swapped in any header, and inside Basic credentials (git)', async (t) => {
  const raw = applySecrets(SET, target('github.com'), { target: '/org/repo.git/info/refs', headers: ['X-Token', `token ${TOKEN.placeholder!}`], inspected: true });
  t.same(raw, { ok: true, headers: ['X-Token', `token ${TOKEN.value}`], screened: ['X-Token', '(secret)'], injected: ['GITHUB_TOKEN sha256:0123456789ab'] });
  const basic = applySecrets(SET, target('github.com'), { target: '/', headers: ['Authorization', `Basic ${b64(`x-access-token:${TOKEN.placeholder!}`)}`], inspected: true });
  t.same(basic.ok && basic.headers, ['Authorization', `Basic ${b64(`x-access-token:${TOKEN.value}`)}`]);
  const unpadded = applySecrets(SET, target('github.com'), { target: '/', headers: ['authorization', `basic ${b64(`u:${TOKEN.placeholder!}`).replace(/=+$/, '')}`], inspected: true });
  t.same(unpadded.ok && unpadded.headers, ['authorization', `Basic ${b64(`u:${TOKEN.value}`)}`], 'lenient base64 read, canonical written');
});

t.test('a rules refusal reads the screened fields: a swapped override header is never quoted', async (t) => {
  const ruled = buildPolicy({ allowHosts: [{ host: 'github.com', inspect: true, methods: ['GET'], secrets: [{ name: 'GITHUB_TOKEN' }] }] });
  if (!ruled.ok) throw new Error('policy');
  const to = checkTarget(ruled.policy, 'github.com', 443);
  if (!to.allowed) throw new Error(to.detail);
  const out = applySecrets(SET, to, { target: '/', headers: ['X-HTTP-Method-Override', TOKEN.placeholder!], inspected: true });
  if (!out.ok) return t.fail('refused');
  t.same(out.headers, ['X-HTTP-Method-Override', TOKEN.value], 'swapped, as asked');
  const verdict = checkRequest(to, { method: 'GET', target: '/', rawHeaders: out.screened });
  t.match(verdict, { allowed: false, reason: 'method_not_allowed' });
  const detail = verdict.allowed ? '' : verdict.detail;
  t.notOk(detail.toUpperCase().includes(TOKEN.value.toUpperCase().slice(0, 20)) || detail.toUpperCase().includes(TOKEN.placeholder!.toUpperCase().slice(0, 20)), detail);
});

t.test('a malformed Basic value without a placeholder is left as is', async (t) => {
  const out = applySecrets(SET, target('github.com'), { target: '/', headers: ['Authorization', 'Basic !!!notbase64'], inspected: true });
  t.same(out.ok && out.headers, ['Authorization', 'Basic !!!notbase64']);
});

t.test('a request without placeholders to a host without secrets is unchanged', async (t) => {
  const headers = ['Accept', '*/*', 'Cookie', 'a=b'];
  const out = applySecrets(SET, target('gist.example'), { target: '/x?y=1', headers, inspected: true });
  t.same(out, { ok: true, headers, screened: headers, injected: [] });
  t.same(applySecrets(undefined, target('gist.example'), { target: '/', headers, inspected: false }), { ok: true, headers, screened: headers, injected: [] });
});

const REFUSED: { name: string; host: string; target?: string; headers?: string[]; inspected?: boolean; names: string[] }[] = [
  { name: 'placeholder to an unbound host', host: 'gist.example', headers: ['Authorization', `Bearer ${TOKEN.placeholder!}`], names: ['GITHUB_TOKEN'] },
  { name: 'placeholder of another secret to a bound host', host: 'api.github.com', headers: ['X-Npm', NPM.placeholder!], names: ['NPM_TOKEN'] },
  { name: 'placeholder in Basic credentials to an unbound host', host: 'gist.example', headers: ['Authorization', `Basic ${b64(`u:${TOKEN.placeholder!}`)}`], names: ['GITHUB_TOKEN'] },
  { name: 'placeholder in Basic under another header name', host: 'gist.example', headers: ['X-Auth', `Basic ${b64(`u:${TOKEN.placeholder!}`)}`], names: ['GITHUB_TOKEN'] },
  { name: 'placeholder percent-encoded in a header', host: 'gist.example', headers: ['Cookie', `t=${TOKEN.placeholder!.replace('_', '%5F')}`], names: ['GITHUB_TOKEN'] },
  { name: 'placeholder in a header name', host: 'github.com', headers: [`X-${TOKEN.placeholder!}`, '1'], names: ['GITHUB_TOKEN'] },
  { name: 'placeholder in the URL to a bound host', host: 'github.com', target: `/x?token=${TOKEN.placeholder!}`, names: ['GITHUB_TOKEN'] },
  { name: 'placeholder percent-encoded in the URL', host: 'github.com', target: `/x?t=${[...TOKEN.placeholder!].map((c) => `%${c.charCodeAt(0).toString(16)}`).join('')}`, names: ['GITHUB_TOKEN'] },
  { name: 'placeholder double-encoded in the URL', host: 'gist.example', target: `/x/${TOKEN.placeholder!.replace('g', '%2567')}`, names: ['GITHUB_TOKEN'] },
  { name: 'placeholder in the Host header', host: 'github.com', headers: ['Host', `${TOKEN.placeholder!}.github.com`], names: ['GITHUB_TOKEN'] },
  { name: 'bound placeholder over plain HTTP', host: 'github.com', headers: ['Authorization', `token ${TOKEN.placeholder!}`], inspected: false, names: ['GITHUB_TOKEN'] },
  { name: 'two placeholders', host: 'gist.example', headers: ['A', `${TOKEN.placeholder!}${NPM.placeholder!}`], names: ['GITHUB_TOKEN', 'NPM_TOKEN'] },
];

for (const row of REFUSED) {
  t.test(`refused: ${row.name}`, async (t) => {
    const out = applySecrets(SET, target(row.host), { target: row.target ?? '/', headers: row.headers ?? [], inspected: row.inspected ?? true });
    if (out.ok) return t.fail('allowed');
    t.equal(out.reason, 'secret_wrong_host');
    t.same(out.secrets, row.names.map((n) => `${n} ${SET.byName.get(n)!.fingerprint}`));
    for (const s of [TOKEN, NPM]) {
      t.notOk(out.detail.includes(s.placeholder!) || out.detail.includes(s.value), 'the detail holds no placeholder or value');
    }
  });
}

t.test('over plain HTTP to a bound host, nothing is put in', async (t) => {
  const out = applySecrets(SET, target('api.github.com'), { target: '/', headers: ['Accept', '*/*'], inspected: false });
  t.same(out, { ok: true, headers: ['Accept', '*/*'], screened: ['Accept', '*/*'], injected: [] });
});

t.test('screenTarget: the URL and the Host header alone, before the host is known', async (t) => {
  t.equal(screenTarget(SET, 'http://gist.example/ok', ['Host', 'gist.example']), undefined);
  t.match(screenTarget(SET, `http://gist.example/${TOKEN.placeholder!}`, []), { detail: /GITHUB_TOKEN is in the request URL/, secrets: ['GITHUB_TOKEN sha256:0123456789ab'] });
  t.match(screenTarget(SET, '/', ['host', `${NPM.placeholder!}.example`])?.detail, /NPM_TOKEN.*Host header/);
  // A host name has no case: a placeholder in it is one in any case, and never quoted by a later refusal.
  for (const cased of [NPM.placeholder!.toLowerCase(), NPM.placeholder!.toUpperCase()]) {
    t.match(screenTarget(SET, '/', ['Host', `${cased}.example:443`])?.detail, /NPM_TOKEN.*Host header/, `the Host header, ${cased === NPM.placeholder!.toLowerCase() ? 'lower' : 'upper'} case`);
  }
  t.equal(screenTarget(undefined, `/${TOKEN.placeholder!}`, []), undefined, 'no secrets, nothing to screen');
});

t.test('checkTarget refuses a placeholder in a host name, in any case, without naming the host', async (t) => {
  const wild = buildPolicy({ allowHosts: ['*.wild.example'], mode: 'report' });
  if (!wild.ok) throw new Error('policy');
  const withSecrets = { ...wild.policy, secrets: SET };
  for (const host of [`${TOKEN.placeholder!}.wild.example`, `${TOKEN.placeholder!.toUpperCase()}.wild.example`, `x${NPM.placeholder!.toLowerCase()}.nowhere.example`]) {
    const out = checkTarget(withSecrets, host, 443);
    t.match(out, { allowed: false, reason: 'secret_wrong_host', host: undefined }, host);
  }
  t.equal(checkTarget(withSecrets, 'a.wild.example', 443).allowed, true);
  t.equal(checkTarget(wild.policy, `${TOKEN.placeholder!.toLowerCase()}.wild.example`, 443).allowed, true, 'no secrets, no screen');
});

t.test('a policy whose bound secrets are not loaded fails closed', async (t) => {
  const out = applySecrets(undefined, target('api.github.com'), { target: '/', headers: [], inspected: true });
  t.equal(out.ok, false);
});

t.test('property: no refusal holds a value or a placeholder, wherever the placeholder is put', async (t) => {
  const alphabet = fc.constantFrom(...'abcXYZ019_-');
  const secret = fc
    .tuple(fc.string({ unit: alphabet, minLength: 16, maxLength: 40 }), fc.string({ unit: alphabet, minLength: 8, maxLength: 40 }))
    .filter(([p, v]) => p !== v && !p.includes(v) && !v.includes(p));
  const where = fc.constantFrom('url', 'url-encoded', 'header', 'header-name', 'basic', 'host');
  await holds(
    t,
    fc.property(secret, where, fc.string({ maxLength: 8 }), fc.boolean(), ([placeholder, value], at, noise, inspected) => {
      const set = createSecretSet([{ name: 'GITHUB_TOKEN', value, placeholder, fingerprint: 'sha256:000000000000' }]);
      const enc = [...placeholder].map((c) => `%${c.charCodeAt(0).toString(16)}`).join('');
      const request = {
        target: at === 'url' ? `/a${noise}${placeholder}` : at === 'url-encoded' ? `/a?${enc}` : '/',
        headers:
          at === 'header' ? ['X-A', `${noise}${placeholder}`] : at === 'header-name' ? [`x${placeholder}`, 'v'] : at === 'basic' ? ['Authorization', `Basic ${b64(`${noise}:${placeholder}`)}`] : at === 'host' ? ['Host', placeholder] : [],
        inspected,
      };
      const out = applySecrets(set, target('gist.example'), request);
      if (out.ok) return false;
      return !out.detail.includes(placeholder) && !out.detail.includes(value) && !out.secrets.some((s) => s.includes(placeholder) || s.includes(value));
    }),
    500,
  );
});

t.test('property: to a bound host inside inspected TLS, the placeholder never survives into a header', async (t) => {
  const alphabet = fc.constantFrom(...'abcXYZ019_');
  await holds(
    t,
    fc.property(fc.string({ unit: alphabet, minLength: 16, maxLength: 40 }), fc.string({ unit: alphabet, minLength: 8, maxLength: 40 }), fc.string({ maxLength: 6 }), (placeholder, value, noise) => {
      fc.pre(!placeholder.includes(value) && !value.includes(placeholder));
      const set = createSecretSet([{ name: 'GITHUB_TOKEN', value, placeholder, fingerprint: 'sha256:000000000000' }]);
      const out = applySecrets(set, target('github.com'), { target: '/', headers: ['X-A', `${noise}${placeholder}${noise}`, 'Authorization', `Basic ${b64(`u:${placeholder}`)}`], inspected: true });
      if (!out.ok) return false;
      const decoded = Buffer.from(out.headers[3]!.slice(6), 'base64').toString('latin1');
      return !out.headers.join('\n').includes(placeholder) && !decoded.includes(placeholder) && decoded === `u:${value}`;
    }),
    300,
  );
});
