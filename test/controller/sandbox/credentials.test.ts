/**
 * Sandboxes with inspected hosts and secrets (spec/credential-plan.ts, sandbox/credential-source.ts,
 * sandbox/deployment-ca.ts) on the in-memory engine: what each container's create body carries
 * (the proxy: the policy, the CA, the value, the placeholder; the sandbox: the placeholder, the CA
 * certificate, the trust variables, never the value or the key, in no label either), the
 * placeholder's shape, the deployment CA's file and the directories refused, the config refused,
 * a create refused when a value is missing (nothing left behind, the value never named), and a
 * rebuilt proxy that keeps the sandbox's placeholder.
 */
import t, { type Test } from 'tap';
import pino from 'pino';
import { spawn } from 'node:child_process';
import { chmodSync, linkSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDockerSandbox, isSandboxError, type DeploymentConfigInput } from '../../../controller/index.js';
import { parseDeploymentConfig } from '../../../controller/spec/config.js';
import { entriesOverlap, placeholderFor } from '../../../controller/spec/credential-plan.js';
import { loadDeploymentCa, CA_FILE_NAME } from '../../../controller/sandbox/deployment-ca.js';
import { decodeInline, IMAGES } from '../../../common/index.js';
import { FakeEngine } from '../../support/fake-engine.js';
import { plainNode } from '../../support/plain-node.js';

const TOKEN = `ghp_${'A1b2C3d4E5'.repeat(3)}x9Y8z7`;
const NPM = `npm_${'Qw3rTy'.repeat(6)}`;

function stateDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'cap-state-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'state');
}

const SECRETS = [
  { name: 'GITHUB_TOKEN', hosts: ['api.github.com', 'github.com'], header: 'Authorization', format: 'Bearer {}' },
  { name: 'NPM_TOKEN', hosts: ['registry.npmjs.org'] },
];

function fake(t: Test, config: Partial<DeploymentConfigInput>, env: NodeJS.ProcessEnv = { GITHUB_TOKEN: TOKEN, NPM_TOKEN: NPM }) {
  const engine = new FakeEngine([IMAGES.sandbox, IMAGES.egress]);
  const full = { endpoint: 'unix:///nonexistent/fake-engine.sock', egressIsolation: 'sandbox' as const, stateDir: stateDir(t), ...config };
  const provider = createDockerSandbox(full, { labels: { 'dev.capybara.test': 'fake' } }, { logger: pino({ level: 'silent' }), engine, env });
  return { engine, provider, stateDir: full.stateDir };
}

const envOf = (list: readonly string[] | undefined): Record<string, string> =>
  Object.fromEntries((list ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));

const spec = (id: string, allowHosts: string[], env?: Record<string, string>) => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts }, ...(env === undefined ? {} : { env }) });

/** Every label of every object the engine holds, as one text. */
function allLabels(engine: FakeEngine): string {
  return JSON.stringify([
    ...[...engine.containers.values()].map((c) => c.body.Labels),
    ...[...engine.networks.values()].map((n) => n.body),
    ...[...engine.volumes.values()].map((v) => v.body),
  ]);
}

t.test('a sandbox with a secret: the proxy holds the value, the sandbox a placeholder of its shape and the CA', async (t) => {
  const s = fake(t, { secrets: SECRETS, inspectHosts: ['*.npmjs.org'] });
  await s.provider.create(spec('c1', ['api.github.com', 'pypi.org', '*.npmjs.org'], { GITHUB_TOKEN: 'the caller\'s own', A: 'b' }));
  const sandbox = s.engine.containers.get('cap-c1')!.body;
  const egress = s.engine.containers.get('cap-c1-egress')!.body;
  const se = envOf(sandbox.Env);
  const ee = envOf(egress.Env);

  const placeholder = se.GITHUB_TOKEN ?? '';
  t.match(placeholder, /^ghp_[A-Za-z0-9]{36}$/, 'the placeholder has the token\'s shape');
  t.not(placeholder, TOKEN);
  t.equal(placeholder.length, TOKEN.length);
  t.equal(se.A, 'b', 'the spec\'s own variables stay');
  t.notOk('NPM_TOKEN' in se, 'a secret none of whose hosts is an entry does not apply');

  t.same(JSON.parse(ee.EGRESS_POLICY_JSON ?? ''), {
    version: 1,
    allowHosts: [
      { host: 'api.github.com', inspect: true, secrets: [{ name: 'GITHUB_TOKEN', header: 'Authorization', format: 'Bearer {}', env: 'CAPYBARA_SECRET_GITHUB_TOKEN' }] },
      'pypi.org',
      { host: '*.npmjs.org', inspect: true },
    ],
  }, 'the per-sandbox policy: inspected entries with their secrets, the rest as names');
  t.notOk('EGRESS_ALLOW_HOSTS' in ee, 'one policy, never two');
  t.equal(ee.CAPYBARA_SECRET_GITHUB_TOKEN, TOKEN, 'the value, under a variable no name can make one the proxy reads');
  t.equal(ee.EGRESS_PLACEHOLDER_GITHUB_TOKEN, placeholder, 'the placeholder the sandbox holds');

  const stored = readFileSync(join(s.stateDir, CA_FILE_NAME), 'utf8');
  const ca = await decodeInline(ee.EGRESS_CA_INLINE ?? '');
  t.equal(ca.certificatePem + ca.keyPem, stored, 'the proxy gets the deployment CA, key included');
  t.equal(Buffer.from(se.CAPYBARA_CA_CERT ?? '', 'base64').toString(), ca.certificatePem, 'the sandbox gets its certificate');
  t.same(
    [se.SSL_CERT_FILE, se.REQUESTS_CA_BUNDLE, se.CURL_CA_BUNDLE, se.GIT_SSL_CAINFO, se.PIP_CERT, se.NODE_EXTRA_CA_CERTS],
    ['/etc/capybara/ca-bundle.pem', '/etc/capybara/ca-bundle.pem', '/etc/capybara/ca-bundle.pem', '/etc/capybara/ca-bundle.pem', '/etc/capybara/ca-bundle.pem', '/etc/capybara/ca.pem'],
    'every client trusts the bundle (Node the CA on top of its own)',
  );
  t.match((sandbox.HostConfig?.Tmpfs as Record<string, string> | undefined)?.['/etc/capybara'] ?? '', /mode=0755/, 'a root tmpfs the sandbox user reads and cannot write');
  t.match((sandbox.Cmd ?? []).join(' '), /base64 -d; \} > \/etc\/capybara\/ca-bundle\.pem.*mv \/etc\/capybara\/ca\.pem\.new \/etc\/capybara\/ca\.pem && exec sleep infinity$/, 'the root idle process writes the CA first');

  const sandboxText = JSON.stringify(sandbox);
  const keyBody = ca.keyPem.split('\n').slice(1, -2).join('');
  t.notMatch(sandboxText, TOKEN, 'the value is nowhere in the sandbox\'s body');
  t.notMatch(sandboxText, keyBody.slice(0, 40), 'nor the CA key');
  t.notMatch(sandboxText, ee.EGRESS_CA_INLINE ?? '', 'nor the inline CA');
  t.notMatch(allLabels(s.engine), TOKEN, 'no label holds the value');
  t.notMatch(allLabels(s.engine), placeholder, 'nor the placeholder');
  t.notMatch(allLabels(s.engine), keyBody.slice(0, 40), 'nor the key');

  await s.provider.create(spec('c2', ['api.github.com']));
  const second = envOf(s.engine.containers.get('cap-c2')!.body.Env).GITHUB_TOKEN;
  t.not(second, placeholder, 'each sandbox its own placeholder');
  t.equal(envOf(s.engine.containers.get('cap-c2-egress')!.body.Env).EGRESS_CA_INLINE, ee.EGRESS_CA_INLINE, 'one deployment CA');
});

t.test('a sandbox with nothing to inspect is as before: its allowlist registered, no CA, no tmpfs', async (t) => {
  const s = fake(t, { secrets: SECRETS, inspectHosts: ['api.gitlab.com'] });
  await s.provider.create(spec('p1', ['pypi.org', '*.github.com']));
  const se = envOf(s.engine.containers.get('cap-p1')!.body.Env);
  const ee = envOf(s.engine.containers.get('cap-p1-egress')!.body.Env);
  t.same(registeredHosts(s.engine, 'cap-p1'), ['pypi.org', '*.github.com']);
  t.notOk('EGRESS_ALLOW_HOSTS' in ee || 'EGRESS_POLICY_JSON' in ee || 'EGRESS_CA_INLINE' in ee || 'CAPYBARA_CA_CERT' in se || 'SSL_CERT_FILE' in se || 'GITHUB_TOKEN' in se, 'nothing of the credentials (a wildcard entry is no secret host)');
  t.notOk('/etc/capybara' in ((s.engine.containers.get('cap-p1')!.body.HostConfig?.Tmpfs ?? {}) as Record<string, string>));
});

t.test('every entry that allows a name inspectHosts covers is inspected, however it is spelled', async (t) => {
  const s = fake(t, { inspectHosts: ['*.npmjs.org', 'api.github.com'] });
  await s.provider.create(spec('o1', ['registry.npmjs.org', '*.github.com', 'npmjs.org', 'pypi.org']));
  const policy = JSON.parse(envOf(s.engine.containers.get('cap-o1-egress')!.body.Env).EGRESS_POLICY_JSON ?? '') as { allowHosts: unknown[] };
  t.same(policy.allowHosts, [{ host: 'registry.npmjs.org', inspect: true }, { host: '*.github.com', inspect: true }, 'npmjs.org', 'pypi.org'], 'a name below an inspected wildcard, a wildcard over an inspected name; not the wildcard\'s parent, nor another name');
  const pairs: Array<[string, string, boolean]> = [
    ['a.example', 'a.example', true], ['a.example', 'b.example', false], ['A.Example', 'a.example', true],
    ['*.example', 'x.example', true], ['*.example', 'x.y.example', true], ['*.example', 'example', false], ['*.example', 'xexample', false],
    ['*.example', '*.example', true], ['*.example', '*.y.example', true], ['*.y.example', '*.example', true], ['*.example', '*.other', false], ['*.example', '*.xexample', false],
  ];
  for (const [a, b, expected] of pairs) {
    t.equal(entriesOverlap(a, b), expected, `${a} and ${b}`);
    t.equal(entriesOverlap(b, a), expected, `${b} and ${a}`);
  }
});

t.test('a create whose secret cannot be read is refused, naming the secret and where, never the value; nothing is left', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cap-secret-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'bad'), `ghp_${'x'.repeat(30)}\u0007tail\n`);
  writeFileSync(join(dir, 'empty'), '\n');
  writeFileSync(join(dir, 'good'), `${TOKEN}\n`);
  const rows: Array<{ name: string; secret: (typeof SECRETS)[number] & { file?: string }; env: NodeJS.ProcessEnv; err: RegExp }> = [
    { name: 'variable not set', secret: SECRETS[0]!, env: {}, err: /secrets\[0\] \(GITHUB_TOKEN, from the controller's variable GITHUB_TOKEN\): the variable is not set/ },
    { name: 'empty variable', secret: SECRETS[0]!, env: { GITHUB_TOKEN: '' }, err: /the value is empty/ },
    { name: 'a blank in it', secret: SECRETS[0]!, env: { GITHUB_TOKEN: 'ghp_abc def ghi jkl mno pqr stu' }, err: /the value holds a blank, a control character/ },
    { name: 'too short for a placeholder', secret: SECRETS[0]!, env: { GITHUB_TOKEN: 'ghp_short' }, err: /the value leaves 5 characters after its prefix, fewer than 16/ },
    { name: 'file missing', secret: { ...SECRETS[0]!, file: join(dir, 'nope') }, env: {}, err: /secrets\[0\] \(GITHUB_TOKEN, from the file .*nope\): cannot read it: ENOENT/ },
    { name: 'control character in the file', secret: { ...SECRETS[0]!, file: join(dir, 'bad') }, env: {}, err: /control character/ },
    { name: 'empty file', secret: { ...SECRETS[0]!, file: join(dir, 'empty') }, env: {}, err: /the value is empty/ },
    { name: 'a directory', secret: { ...SECRETS[0]!, file: dir }, env: {}, err: /cannot read it: not a regular file/ },
  ];
  for (const row of rows) {
    const s = fake(t, { secrets: [row.secret] }, row.env);
    const err = await s.provider.create(spec('bad', ['api.github.com'])).catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'invalid_config'), `${row.name}: ${String(err)}`);
    t.match((err as Error).message, row.err, row.name);
    t.notMatch((err as Error).message, /ghp_(abc|short|x{30})/, `${row.name}: the value is not in the message`);
    t.same([...s.engine.containers.keys()], [], `${row.name}: nothing created`);
  }
  // As a Kubernetes Secret mount has it: the file is a link into ..data.
  symlinkSync(join(dir, 'good'), join(dir, 'linked'));
  const s = fake(t, { secrets: [{ ...SECRETS[0]!, file: join(dir, 'linked') }] }, {});
  await s.provider.create(spec('good', ['api.github.com']));
  t.equal(envOf(s.engine.containers.get('cap-good-egress')!.body.Env).CAPYBARA_SECRET_GITHUB_TOKEN, TOKEN, 'a file\'s value (through a link), its trailing newline dropped');
});

t.test('a rebuilt egress proxy keeps the sandbox\'s placeholder and reads the value again', async (t) => {
  const env: NodeJS.ProcessEnv = { GITHUB_TOKEN: TOKEN };
  const s = fake(t, { secrets: SECRETS }, env);
  const h = await s.provider.create(spec('r1', ['api.github.com']));
  const placeholder = envOf(s.engine.containers.get('cap-r1')!.body.Env).GITHUB_TOKEN;
  await s.engine.removeContainer('cap-r1-egress');
  env.GITHUB_TOKEN = `ghp_${'R0t4t3d'.repeat(5)}Z`; // rotated meanwhile, same length
  await s.provider.exec(h, 'true');
  const ee = envOf(s.engine.containers.get('cap-r1-egress')!.body.Env);
  t.equal(ee.EGRESS_PLACEHOLDER_GITHUB_TOKEN, placeholder, 'the placeholder the sandbox holds');
  t.equal(ee.CAPYBARA_SECRET_GITHUB_TOKEN, env.GITHUB_TOKEN, 'the value as it is now');
  t.ok(ee.EGRESS_POLICY_JSON !== undefined && ee.EGRESS_CA_INLINE !== undefined);
});

t.test('a sandbox made without the CA gets a rebuilt proxy that does not inspect, whatever the config says now', async (t) => {
  const engine = new FakeEngine([IMAGES.sandbox, IMAGES.egress]);
  const make = (more: Partial<DeploymentConfigInput>) =>
    createDockerSandbox({ endpoint: 'unix:///nonexistent/fake-engine.sock', egressIsolation: 'sandbox', ...more }, { labels: { 'dev.capybara.test': 'fake' } }, { logger: pino({ level: 'silent' }), engine, env: { GITHUB_TOKEN: TOKEN } });
  const h = await make({}).create(spec('old1', ['api.github.com']));
  await engine.removeContainer('cap-old1-egress');
  await make({ stateDir: stateDir(t), secrets: SECRETS }).exec(h, 'true');
  const ee = envOf(engine.containers.get('cap-old1-egress')!.body.Env);
  t.same(registeredHosts(engine, 'cap-old1'), ['api.github.com'], 'the allowlist as it was');
  t.notOk('EGRESS_ALLOW_HOSTS' in ee, 'in its registration');
  t.notOk('EGRESS_POLICY_JSON' in ee || 'EGRESS_CA_INLINE' in ee || 'CAPYBARA_SECRET_GITHUB_TOKEN' in ee, 'no inspection, no value');
});

t.test('placeholders have the value\'s shape', async (t) => {
  let i = 0;
  const counter = (n: number): number => (i++ * 7) % n;
  const rows = [
    { name: 'GitHub classic', value: `ghp_${'aB3'.repeat(12)}`, re: /^ghp_[A-Za-z0-9]{36}$/ },
    { name: 'GitHub fine-grained (prefix to the first _)', value: `github_pat_${'aB3_'.repeat(20)}`, re: /^github_[A-Za-z0-9_]{84}$/ },
    { name: 'hex', value: 'deadbeef'.repeat(5), re: /^[0-9a-f]{40}$/ },
    { name: 'digits', value: '12345678901234567890', re: /^[0-9]{20}$/ },
    { name: 'base64 with padding', value: `${'Ab+/'.repeat(5)}xy==`, re: /^[A-Za-z0-9+/]{22}==$/ },
    { name: 'other printable', value: `sk-${'a!b@'.repeat(6)}`, re: /^[A-Za-z0-9]{27}$/ },
  ];
  for (const row of rows) {
    const p = placeholderFor(row.value, counter);
    t.match(p, row.re, row.name);
    t.equal(p.length, row.value.length, `${row.name}: same length`);
  }
  const a = placeholderFor(TOKEN, (n) => Math.floor(Math.random() * n));
  const b = placeholderFor(TOKEN, (n) => Math.floor(Math.random() * n));
  t.not(a, b, 'random');
  t.throws(() => placeholderFor('ghp_0123456789', counter), /fewer than 16/);
});

t.test('a placeholder keeps a vendor prefix (ghp_, sk_, github_), never the secret characters before an "_" further in', async (t) => {
  // The sandbox holds the placeholder: whatever of the value it copies, the sandbox knows. A
  // base64url token has "_" anywhere in it, and a password may too.
  const random = (n: number): number => Math.floor(Math.random() * n);
  const rows = [
    { name: 'base64url token with "_" in the middle', value: 'Zk3mQ9xLrT8vWp2N_aB3cD4eF5gH6iJ7kL8m', secret: 'Zk3mQ9xLrT8vWp2N' },
    { name: 'a password with "_"', value: 'correct-horse-battery_staple0123456789ab', secret: 'correct-horse-battery' },
    { name: 'upper case before "_"', value: 'MYSECRETVALUE_0123456789abcdefABCDEF', secret: 'MYSECRETVALUE' },
  ];
  for (const row of rows) {
    const all = Array.from({ length: 20 }, () => placeholderFor(row.value, random));
    t.same(all.filter((p) => p.startsWith(row.secret)), [], `${row.name}: no placeholder begins with the value's secret characters`);
    t.ok(all.every((p) => p.length === row.value.length), `${row.name}: same length`);
  }
  t.match(placeholderFor(`ghp_${'aB3'.repeat(12)}`, random), /^ghp_/, 'a vendor prefix is kept');
  t.match(placeholderFor(`sk_live_${'aB3'.repeat(8)}`, random), /^sk_/, 'a vendor prefix is kept');
});

t.test('the deployment CA: made once, 0600 in a 0700 directory, reused; a loose or foreign one refused', async (t) => {
  const dir = stateDir(t);
  const [a, b] = await Promise.all([loadDeploymentCa(dir), loadDeploymentCa(dir)]);
  t.equal(a.certificatePem, b.certificatePem, 'two controllers at once agree on one CA');
  t.equal(statSync(dir).mode & 0o777, 0o700);
  t.equal(statSync(join(dir, CA_FILE_NAME)).mode & 0o777, 0o600);
  t.equal((await loadDeploymentCa(dir)).certificatePem, a.certificatePem, 'reused');

  chmodSync(join(dir, CA_FILE_NAME), 0o640);
  await t.rejects(loadDeploymentCa(dir), /deployment-ca\.pem has mode 0640: group or others could read the deployment CA's key; chmod 600/);
  chmodSync(join(dir, CA_FILE_NAME), 0o600);
  chmodSync(dir, 0o750);
  await t.rejects(loadDeploymentCa(dir), /has mode 0750: .*chmod 700/);
  chmodSync(dir, 0o700);

  writeFileSync(join(dir, CA_FILE_NAME), 'not a CA', { mode: 0o600 });
  await t.rejects(loadDeploymentCa(dir), /is no deployment CA/);

  const other = stateDir(t);
  await loadDeploymentCa(other);
  const link = join(other, '..', 'link');
  symlinkSync(other, link);
  await t.rejects(loadDeploymentCa(link), /is not a directory \(a symlink is refused too\)/);
});

/**
 * Loads the deployment CA of `dir` again and again while a racer swaps what it reads: three
 * seconds, and on (up to 15 s) until the racer has been met both ways, since a loaded machine
 * starts it late; never past a read through the swap. What each load gave, and the refusals.
 */
async function raceLoads(dir: string, ours: string): Promise<{ seen: { ours: number; refused: number; theirs: number }; refusals: string[] }> {
  const seen = { ours: 0, refused: 0, theirs: 0 };
  const refusals = new Set<string>();
  const start = Date.now();
  const racing = (): boolean => {
    const ms = Date.now() - start;
    return seen.theirs === 0 && (ms < 3_000 || ((seen.ours === 0 || seen.refused === 0) && ms < 15_000));
  };
  while (racing()) {
    try {
      seen[(await loadDeploymentCa(dir)).certificatePem === ours ? 'ours' : 'theirs'] += 1;
    } catch (err) {
      refusals.add((err as Error).message);
      seen.refused += 1;
    }
  }
  return { seen, refusals: [...refusals] };
}

t.test('the state directory swapped after it was checked is never read through', async (t) => {
  // Whoever can write a parent of the state directory can put another directory in its place
  // between the check and the use. Here the racer turns a parent (a symlink, swapped by rename,
  // so the path never goes missing) between our state directory and one open to others (0755),
  // which holds a CA of the controller's own user: that CA must never be read.
  const root = mkdtempSync('/run/cap-ca-dirswap-');
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const ours = (await loadDeploymentCa(join(root, 'a', 'state'))).certificatePem;
  const theirs = (await loadDeploymentCa(join(root, 'b', 'state'))).certificatePem;
  chmodSync(join(root, 'b', 'state'), 0o755);
  symlinkSync('a', join(root, 'p'));
  const swap = `const fs = require('node:fs'); const [p] = process.argv.slice(1);
    for (let i = 0; ; i++) { const tmp = p + '.' + i; fs.symlinkSync(i % 2 ? 'b' : 'a', tmp); fs.renameSync(tmp, p); }`;
  const racer = spawn(...plainNode('-e', [swap, join(root, 'p')]), { stdio: 'ignore' });
  t.teardown(() => racer.kill('SIGKILL'));
  const dir = join(root, 'p', 'state');
  const { seen, refusals } = await raceLoads(dir, ours);
  t.equal(seen.theirs, 0, `the CA of the directory open to others was never read (${seen.ours} reads of ours, ${seen.refused} refusals)`);
  t.ok(seen.refused > 0 && seen.ours > 0, 'the racer was met both ways');
  t.same(refusals, [`stateDir: ${dir} has mode 0755: group or others could read the deployment CA's key; chmod 700 ${dir}`]);
  t.not(theirs, ours);
});

t.test('the deployment CA file swapped for a symlink after it was checked is never read through the link', async (t) => {
  // Under /run, root's own with mode 0700 (mkdtemp), never under /tmp: an attacker's file is the
  // other CA, in a directory beside the state directory.
  const root = mkdtempSync('/run/cap-ca-swap-');
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'state');
  const file = join(dir, CA_FILE_NAME);
  const ours = (await loadDeploymentCa(dir)).certificatePem;
  const theirs = (await loadDeploymentCa(join(root, 'other'))).certificatePem;
  linkSync(file, join(root, 'ours.pem'));
  // A racer puts the link and our file back in turn, each by rename (the name is never missing).
  const swap = `const fs = require('node:fs'); const [file, ours, other] = process.argv.slice(1);
    for (let i = 0; ; i++) { const tmp = file + '.' + i; if (i % 2) fs.symlinkSync(other, tmp); else fs.linkSync(ours, tmp); fs.renameSync(tmp, file); }`;
  const racer = spawn(...plainNode('-e', [swap, file, join(root, 'ours.pem'), join(root, 'other', CA_FILE_NAME)]), { stdio: 'ignore' });
  t.teardown(() => racer.kill('SIGKILL'));
  const { seen, refusals } = await raceLoads(dir, ours);
  t.equal(seen.theirs, 0, `the CA behind the link was never read (${seen.ours} reads of ours, ${seen.refused} refusals)`);
  t.ok(seen.refused > 0 && seen.ours > 0, 'the racer was met both ways');
  t.same(refusals, [`stateDir: ${file} is not a file (a symlink is refused too); the deployment CA is kept in a file of the controller's own`]);
  t.not(theirs, ours);
});

t.test('the config of credentials', async (t) => {
  const base = { endpoint: 'unix:///x.sock', stateDir: '/var/lib/cap' };
  const rows = [
    { name: 'secrets need stateDir', input: { endpoint: 'unix:///x.sock', secrets: [SECRETS[0]] }, err: /stateDir: is required with inspectHosts or secrets/ },
    { name: 'inspectHosts need stateDir', input: { endpoint: 'unix:///x.sock', inspectHosts: ['api.github.com'] }, err: /stateDir: is required/ },
    { name: 'a wildcard secret host', input: { ...base, secrets: [{ name: 'T', hosts: ['*.github.com'] }] }, err: /secrets\[0\]\.hosts\[0\]: is a wildcard: a secret binds to exact names/ },
    { name: 'a proxy variable', input: { ...base, secrets: [{ name: 'HTTPS_PROXY', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'NODE_OPTIONS', input: { ...base, secrets: [{ name: 'NODE_OPTIONS', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'HTTP_PROXY', input: { ...base, secrets: [{ name: 'HTTP_PROXY', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'NO_PROXY', input: { ...base, secrets: [{ name: 'NO_PROXY', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'HOME', input: { ...base, secrets: [{ name: 'HOME', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'SSL_CERT_FILE', input: { ...base, secrets: [{ name: 'SSL_CERT_FILE', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'SSL_CERT_DIR', input: { ...base, secrets: [{ name: 'SSL_CERT_DIR', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'NODE_EXTRA_CA_CERTS', input: { ...base, secrets: [{ name: 'NODE_EXTRA_CA_CERTS', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'REQUESTS_CA_BUNDLE', input: { ...base, secrets: [{ name: 'REQUESTS_CA_BUNDLE', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'CURL_CA_BUNDLE', input: { ...base, secrets: [{ name: 'CURL_CA_BUNDLE', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'GIT_SSL_CAINFO', input: { ...base, secrets: [{ name: 'GIT_SSL_CAINFO', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'PIP_CERT', input: { ...base, secrets: [{ name: 'PIP_CERT', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'CAPYBARA_SANDBOX', input: { ...base, secrets: [{ name: 'CAPYBARA_SANDBOX', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'CAPYBARA_', input: { ...base, secrets: [{ name: 'CAPYBARA_', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'EGRESS_POLICY_JSON', input: { ...base, secrets: [{ name: 'EGRESS_POLICY_JSON', hosts: ['a.com'] }] }, err: /is a variable the controller sets/ },
    { name: 'a loader variable', input: { ...base, secrets: [{ name: 'LD_PRELOAD', hosts: ['a.com'] }] }, err: /read by the dynamic loader/ },
    { name: 'PATH', input: { ...base, secrets: [{ name: 'PATH', hosts: ['a.com'] }] }, err: /read by the dynamic loader or by bash/ },
    { name: 'lower case', input: { ...base, secrets: [{ name: 'token', hosts: ['a.com'] }] }, err: /must be an upper-case variable name/ },
    { name: 'twice', input: { ...base, secrets: [{ name: 'T', hosts: ['a.com'] }, { name: 'T', hosts: ['b.com'] }] }, err: /secrets\[1\]\.name: T is named twice/ },
    { name: 'format without {}', input: { ...base, secrets: [{ name: 'T', hosts: ['a.com'], header: 'X-Key', format: 'Bearer' }] }, err: /must hold exactly one \{\}/ },
    { name: 'format without header', input: { ...base, secrets: [{ name: 'T', hosts: ['a.com'], format: 'Bearer {}' }] }, err: /format needs header/ },
    { name: 'a header that is no field name', input: { ...base, secrets: [{ name: 'T', hosts: ['a.com'], header: 'Bad Header' }] }, err: /must be an HTTP header name/ },
    { name: 'a relative file', input: { ...base, secrets: [{ name: 'T', hosts: ['a.com'], file: 'run/secret' }] }, err: /must be an absolute path/ },
    { name: 'an inspected host that is no entry', input: { ...base, inspectHosts: ['*'] }, err: /inspectHosts\[0\]/ },
  ];
  for (const row of rows) t.throws(() => parseDeploymentConfig(row.input), row.err, row.name);
  t.ok(parseDeploymentConfig({ ...base, inspectHosts: ['*.npmjs.org'], secrets: SECRETS }), 'a good one');
  await t.rejects(createDockerSandbox({ endpoint: 'unix:///x.sock' }).create(spec('e1', ['a.com'], { CAPYBARA_CA_CERT: 'x' })), /spec\.env\.CAPYBARA_CA_CERT: is reserved/, 'a spec cannot set the CA variable');
});

/** The allowlist an allowlist sandbox's egress proxy has registered (the fake engine's volume file). */
function registeredHosts(engine: FakeEngine, name: string): unknown {
  return engine.registration(name)?.policy.allowHosts;
}
