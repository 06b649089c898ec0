/**
 * The edge checks of the sandbox spec and exec options (zod schemas), without Docker: allowlist
 * entries judged by policy/ exactly as the egress proxy judges them, the environment-name rules
 * (one syntax for spec.env and exec env; the loader's and bash's variables refused in spec.env),
 * the deployment's ceilings of numeric limits, HOME with a persistent workspace, unknown keys,
 * and the codes of each refusal.
 */
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { buildPolicy } from '../../../policy/index.js';
import { decodeAllowHosts, EGRESS_ENV } from '../../../common/index.js';
import { parseDeploymentConfig } from '../../../controller/spec/config.js';
import { planSandbox } from '../../../controller/spec/sandbox-plan.js';
import { egressContainerBody } from '../../../controller/docker/container-spec.js';
import { checkExecOptions } from '../../../controller/spec/exec-options.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import { checkSandboxName } from '../../../controller/spec/names.js';

const config = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', allowOpenEgress: true });
const opts = { extraLabels: {} };
const withHosts = (allowHosts: unknown[]) => ({ id: 'c1', image: 'img', limits: { egress: 'allowlist', allowHosts } });

function refused(t: Test, fn: () => unknown, code: string, mentions?: RegExp): void {
  try {
    fn();
    t.fail(`expected ${code}`);
  } catch (err) {
    t.equal(isSandboxError(err) ? err.code : String(err), code);
    if (mentions !== undefined) t.match((err as Error).message, mentions);
  }
}

t.test('allowlist entries the egress proxy would refuse are refused, naming the entry and why', async (t) => {
  const rows: { name: string; entry: string; why: RegExp }[] = [
    { name: 'dotted IPv4', entry: '10.0.0.1', why: /IP literal/ },
    { name: 'hex IPv4', entry: '0x7f.1', why: /IP literal/ },
    { name: 'decimal IPv4', entry: '2130706433', why: /IP literal/ },
    { name: 'bracketed IPv6', entry: '[::1]', why: /"\[::1\]"/ },
    { name: 'wildcard over a public suffix', entry: '*.com', why: /public suffix/ },
    { name: 'wildcard over a two-label public suffix', entry: '*.co.uk', why: /public suffix/ },
    { name: 'wildcard over a private-section suffix (GitHub Pages)', entry: '*.github.io', why: /"github\.io" is a public suffix \(Public Suffix List, private section/ },
    { name: 'wildcard over a multi-label private-section suffix (S3)', entry: '*.s3.amazonaws.com', why: /"s3\.amazonaws\.com" is a public suffix/ },
    { name: 'wildcard in the middle', entry: 'a.*.example.com', why: /wildcard/ },
    { name: 'bare wildcard', entry: '*', why: /"\*"/ },
    { name: 'empty label', entry: 'a..example.com', why: /"a\.\.example\.com"/ },
    { name: 'Unicode (must be punycode)', entry: 'bücher.example', why: /punycode/ },
    { name: 'a path', entry: 'example.com/x', why: /"example\.com\/x"/ },
    { name: 'a comma (would split the label codec)', entry: 'a.example,b.example', why: /"a\.example,b\.example"/ },
  ];
  for (const row of rows) {
    refused(t, () => planSandbox(withHosts(['ok.example.com', row.entry]), config, opts), 'invalid_spec', row.why);
    refused(t, () => planSandbox(withHosts([row.entry]), config, opts), 'invalid_spec', /limits\.allowHosts\[0\]/);
  }
});

t.test('accepted entries are kept as the proxy writes them', async (t) => {
  const plan = planSandbox(withHosts(['Example.COM.', '*.PyPI.org', 'files.pythonhosted.org', '*.Example.GitHub.IO']), config, opts);
  t.same(plan.allowHosts, ['example.com', '*.pypi.org', 'files.pythonhosted.org', '*.example.github.io']);
});

t.test('anything the controller accepts, the egress proxy accepts (property)', async (t) => {
  const label = fc.stringMatching(/^[a-z0-9_-]{1,12}$/);
  const entry = fc.oneof(
    fc.array(label, { minLength: 1, maxLength: 4 }).map((labels) => labels.join('.')),
    fc.array(label, { minLength: 1, maxLength: 4 }).map((labels) => `*.${labels.join('.')}`),
    fc.string({ maxLength: 20 }),
    fc.constantFrom('com', 'co.uk', '*.com', '*.co.uk', '127.1', '0x7f.1', 'example.com.', '*.github.io', 'localhost'),
  );
  let accepted = 0;
  fc.assert(
    fc.property(fc.array(entry, { maxLength: 5 }), (hosts) => {
      let plan;
      try {
        plan = planSandbox(withHosts(hosts), config, opts);
      } catch (err) {
        if (isSandboxError(err, 'invalid_spec')) return true;
        throw err;
      }
      accepted += 1;
      // What the proxy receives is the environment variable of its create body, decoded.
      const env = egressContainerBody(plan, 'a'.repeat(64), undefined).Env.find((e) => e.startsWith(`${EGRESS_ENV.allowHosts}=`)) ?? '';
      const sent = decodeAllowHosts(env.slice(EGRESS_ENV.allowHosts.length + 1));
      return sent.length === plan.allowHosts.length && buildPolicy({ allowHosts: sent }).ok;
    }),
    { numRuns: 2000, seed: 20261201 },
  );
  t.ok(accepted > 200, `the property saw ${accepted} accepted allowlists`);
});

t.test('one rule for environment names, in the spec and in exec options', async (t) => {
  const names: { name: string; key: string; ok: boolean }[] = [
    { name: 'letters', key: 'FOO', ok: true },
    { name: 'leading underscore', key: '_x1', ok: true },
    { name: 'leading digit', key: '1X', ok: false },
    { name: 'dash', key: 'A-B', ok: false },
    { name: 'equals sign', key: 'A=B', ok: false },
    { name: 'empty', key: '', ok: false },
    { name: 'space', key: 'A B', ok: false },
  ];
  for (const row of names) {
    const spec = () => planSandbox({ id: 'c1', image: 'img', limits: { egress: 'none' }, env: { [row.key]: 'v' } }, config, opts);
    const exec = () => checkExecOptions('true', { env: { [row.key]: 'v' } }, config.maxLimits);
    if (row.ok) {
      t.doesNotThrow(spec, `spec: ${row.name}`);
      t.doesNotThrow(exec, `exec: ${row.name}`);
    } else {
      refused(t, spec, 'invalid_spec', /spec\.env/);
      refused(t, exec, 'invalid_spec', /opts\.env/);
    }
  }
});

t.test('spec refusals and their codes', async (t) => {
  const base = { id: 'c1', image: 'img', limits: { egress: 'none' } };
  const rows: { name: string; spec: unknown; code: string; mentions: RegExp }[] = [
    { name: 'not an object', spec: 'x', code: 'invalid_spec', mentions: /spec/ },
    { name: 'unknown top-level key', spec: { ...base, imgae: 'x' }, code: 'invalid_spec', mentions: /unknown key "imgae"/ },
    { name: 'unknown limit is not dropped', spec: { ...base, limits: { egress: 'none', gpus: 1 } }, code: 'limit_not_expressible', mentions: /"gpus"/ },
    { name: 'memory not whole', spec: { ...base, limits: { egress: 'none', memoryMb: 1.5 } }, code: 'invalid_spec', mentions: /limits\.memoryMb/ },
    { name: 'cpu a string', spec: { ...base, limits: { egress: 'none', cpu: '2' } }, code: 'invalid_spec', mentions: /limits\.cpu/ },
    { name: 'env value not a string', spec: { ...base, env: { A: 1 } }, code: 'invalid_spec', mentions: /spec\.env\.A/ },
    { name: 'unknown durability', spec: { ...base, workspace: { key: 'k', durability: 'forever' } }, code: 'invalid_spec', mentions: /workspace\.durability/ },
    { name: 'allowHosts not an array', spec: { ...base, limits: { egress: 'allowlist', allowHosts: 'a.com' } }, code: 'invalid_spec', mentions: /allowHosts/ },
    { name: 'empty image', spec: { ...base, image: '' }, code: 'invalid_spec', mentions: /spec\.image/ },
    // Inherited by the controller's root execs and the container's root init.
    { name: 'a loader variable in the sandbox env', spec: { ...base, env: { LD_PRELOAD: '/workspace/x.so' } }, code: 'invalid_spec', mentions: /spec\.env\.LD_PRELOAD/ },
    { name: 'a shell start-up file in the sandbox env', spec: { ...base, env: { BASH_ENV: '/workspace/.rc' } }, code: 'invalid_spec', mentions: /spec\.env\.BASH_ENV/ },
    { name: 'PATH in the sandbox env', spec: { ...base, env: { PATH: '/workspace/bin:/usr/bin' } }, code: 'invalid_spec', mentions: /spec\.env\.PATH/ },
    { name: 'an exported shell function', spec: { ...base, env: { BASH_FUNC_x: '() { id; }' } }, code: 'invalid_spec', mentions: /spec\.env\.BASH_FUNC_x/ },
    // cap-<id>-egress is the egress proxy of <id>: a sandbox of that name would be another's proxy.
    { name: 'an id ending in -egress', spec: { ...base, id: 'c1-egress' }, code: 'invalid_spec', mentions: /-egress/ },
  ];
  for (const row of rows) refused(t, () => planSandbox(row.spec, config, opts), row.code, row.mentions);
  t.equal(planSandbox({ id: 'c1', image: 'img', limits: {} }, config, opts).tier, 'allowlist', 'the allowlist tier is the default');
});

t.test('an operator may fix the images sandboxes run', async (t) => {
  const fixed = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', allowedImages: ['capybara-sandbox:latest'] });
  t.equal(planSandbox({ id: 'c1', image: 'capybara-sandbox:latest', limits: { egress: 'none' } }, fixed, opts).image, 'capybara-sandbox:latest', 'a listed image');
  refused(t, () => planSandbox({ id: 'c1', image: 'evil/image:latest', limits: { egress: 'none' } }, fixed, opts), 'invalid_spec', /allowedImages/);
  refused(t, () => planSandbox({ id: 'c1', image: 'capybara-sandbox', limits: { egress: 'none' } }, fixed, opts), 'invalid_spec', /allowedImages/);
  t.equal(planSandbox({ id: 'c1', image: 'any/image', limits: { egress: 'none' } }, config, opts).image, 'any/image', 'unset: any image');
});

t.test('exec option refusals', async (t) => {
  const rows: { name: string; command: unknown; options: unknown; mentions: RegExp }[] = [
    { name: 'misspelt option', command: 'true', options: { timeout: 5 }, mentions: /unknown key "timeout"/ },
    { name: 'NUL in the command', command: 'a\0b', options: {}, mentions: /command/ },
    { name: 'command not a string', command: 42, options: {}, mentions: /command/ },
    { name: 'negative timeout', command: 'true', options: { timeoutMs: -1 }, mentions: /opts\.timeoutMs/ },
    { name: 'a timeout longer than a Node timer holds', command: 'true', options: { timeoutMs: 3_000_000_000 }, mentions: /opts\.timeoutMs/ },
    { name: 'fractional output cap', command: 'true', options: { maxOutputBytes: 1.5 }, mentions: /opts\.maxOutputBytes/ },
    { name: 'tag with a space', command: 'true', options: { tag: 'a b' }, mentions: /opts\.tag/ },
    { name: 'NUL in cwd', command: 'true', options: { cwd: '/tmp\0' }, mentions: /opts\.cwd/ },
    { name: 'stdin a number', command: 'true', options: { stdin: 5 }, mentions: /opts\.stdin/ },
    { name: 'signal not an AbortSignal', command: 'true', options: { signal: {} }, mentions: /opts\.signal/ },
  ];
  for (const row of rows) refused(t, () => checkExecOptions(row.command, row.options, config.maxLimits), 'invalid_spec', row.mentions);
  const { options } = checkExecOptions('true', undefined, config.maxLimits);
  t.same([options.timeoutMs, options.tag, options.maxOutputBytes, options.env, options.fresh], [600_000, 'default', 1024 * 1024, {}, false], 'defaults');
});

// glibc's sysdeps/generic/unsecvars.h (UNSECURE_ENVVARS, with GLIBC_TUNABLES), as of 2.40.
const GLIBC_UNSECURE = [
  'GCONV_PATH', 'GETCONF_DIR', 'GLIBC_TUNABLES', 'HOSTALIASES', 'LD_AUDIT', 'LD_DEBUG', 'LD_DEBUG_OUTPUT', 'LD_DYNAMIC_WEAK',
  'LD_HWCAP_MASK', 'LD_LIBRARY_PATH', 'LD_ORIGIN_PATH', 'LD_PRELOAD', 'LD_PROFILE', 'LD_SHOW_AUXV', 'LD_USE_LOAD_BIAS',
  'LOCALDOMAIN', 'LOCPATH', 'MALLOC_TRACE', 'NIS_PATH', 'NLSPATH', 'RESOLV_HOST_CONF', 'RES_OPTIONS', 'TMPDIR', 'TZDIR',
];
// Older and other lists name more of the same families; bash reads these before or while a script runs.
const FAMILIES_AND_SHELL = [
  'LD_BIND_NOW', 'LD_AOUT_PRELOAD', 'MALLOC_CHECK_', 'MALLOC_ARENA_MAX', 'MALLOC_PERTURB_',
  'BASH_ENV', 'ENV', 'PATH', 'IFS', 'SHELLOPTS', 'BASHOPTS', 'PS4', 'BASH_FUNC_x', 'BASH_COMPAT', 'BASH_XTRACEFD',
  'BASH_LOADABLES_PATH', 'POSIXLY_CORRECT', 'CDPATH', 'GLOBIGNORE', 'EXECIGNORE', 'FUNCNEST', 'TMOUT', 'PROMPT_COMMAND',
];

t.test('the loader\'s and bash\'s start-up variables are refused in spec.env, allowed per command', async (t) => {
  for (const key of [...GLIBC_UNSECURE, ...FAMILIES_AND_SHELL]) {
    refused(t, () => planSandbox({ id: 'c1', image: 'img', limits: { egress: 'none' }, env: { [key]: 'x' } }, config, opts), 'invalid_spec', new RegExp(`spec\\.env\\.${key}: is read by the dynamic loader or by bash`));
    t.doesNotThrow(() => checkExecOptions('true', { env: { [key]: 'x' } }, config.maxLimits), `exec env may set ${key} for its own command`);
  }
  // What workloads set: their own settings and keys, and the usual runtime knobs.
  const ordinary = { OPENAI_API_KEY: 'sk-x', NODE_ENV: 'production', PYTHONUNBUFFERED: '1', PIP_INDEX_URL: 'https://pypi.example/simple', LANG: 'C.UTF-8', LC_ALL: 'en_US.UTF-8', LANGUAGE: 'de:en', TZ: 'Europe/Berlin', HOME: '/workspace', LDAP_URI: 'ldap://x', ENVIRONMENT: 'dev', PATHS: 'a', BASE_PATH: '/x' };
  t.same(planSandbox({ id: 'c1', image: 'img', limits: { egress: 'none' }, env: ordinary }, config, opts).env, ordinary, 'ordinary names pass');
  // A locale is loaded from the file a path names: a name only.
  for (const [key, value] of [['LANG', '/workspace/evil'], ['LC_CTYPE', '../../tmp/x'], ['LANGUAGE', 'de/x']]) {
    refused(t, () => planSandbox({ id: 'c1', image: 'img', limits: { egress: 'none' }, env: { [key as string]: value } }, config, opts), 'invalid_spec', new RegExp(`spec\\.env\\.${key as string}: is a locale variable`));
  }
  // The mark the kills find a command's processes by is the controller's own, in both.
  refused(t, () => planSandbox({ id: 'c1', image: 'img', limits: { egress: 'none' }, env: { CAPYBARA_EXEC: 'x/y' } }, config, opts), 'invalid_spec', /spec\.env\.CAPYBARA_EXEC: is reserved/);
  refused(t, () => checkExecOptions('true', { env: { CAPYBARA_EXEC: 'x/y' } }, config.maxLimits), 'invalid_spec', /opts\.env\.CAPYBARA_EXEC: is reserved/);
});

t.test('allowHosts belongs to a tier with an egress proxy', async (t) => {
  for (const egress of ['none', 'internal', 'open']) {
    refused(t, () => planSandbox({ id: 'c1', image: 'img', limits: { egress, allowHosts: ['a.example'] } }, config, opts), 'invalid_spec', new RegExp(`allowHosts is only used by a tier with an egress proxy \\("allowlist"\\), and limits\\.egress is "${egress}"`));
    t.same(planSandbox({ id: 'c1', image: 'img', limits: { egress, allowHosts: [] } }, config, opts).allowHosts, [], `${egress}: an empty list asks for nothing`);
  }
});

t.test('numeric limits have upper bounds from the deployment config', async (t) => {
  const spec = (limits: Record<string, unknown>) => ({ id: 'c1', image: 'img', limits: { egress: 'none', ...limits } });
  refused(t, () => planSandbox(spec({ memoryMb: 1e9 }), config, opts), 'invalid_spec', /spec\.limits\.memoryMb 1000000000 is above this deployment's maximum of 16384 \(extensionConfig\."sandbox-docker"\.maxLimits\.memoryMb\)/);
  refused(t, () => planSandbox(spec({ cpu: 4.5 }), config, opts), 'invalid_spec', /limits\.cpu 4\.5 .* maximum of 4 .*maxLimits\.cpu/);
  const withDriver = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', volumeDriver: 'sized', maxLimits: { diskMb: 2048 } });
  refused(t, () => planSandbox(spec({ diskMb: 4096 }), withDriver, opts), 'invalid_spec', /limits\.diskMb 4096 .* maximum of 2048/);
  t.equal(planSandbox(spec({ diskMb: 2048 }), withDriver, opts).limits.volumeSize, '2048M', 'the ceiling itself is allowed');
  refused(t, () => checkExecOptions('true', { timeoutMs: 4 * 3_600_000 + 1 }, config.maxLimits), 'invalid_spec', /opts\.timeoutMs 14400001 is above this deployment's maximum of 14400000 ms \(extensionConfig\."sandbox-docker"\.maxLimits\.execTimeoutMs\)/);
  refused(t, () => checkExecOptions('true', { maxOutputBytes: 2 ** 40 }, config.maxLimits), 'invalid_spec', /opts\.maxOutputBytes .*maxLimits\.outputBytes/);
  // An operator's lower ceilings also lower the defaults, never past them.
  const small = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', maxLimits: { cpu: 0.5, memoryMb: 256, execTimeoutMs: 60_000, outputBytes: 4096 } });
  const plan = planSandbox(spec({}), small, opts);
  t.same([plan.limits.nanoCpus, plan.limits.memoryBytes], [5e8, 256 * 1024 * 1024], 'default cpu and memory at the ceilings');
  const { options } = checkExecOptions('true', {}, small.maxLimits);
  t.same([options.timeoutMs, options.maxOutputBytes], [60_000, 4096], 'default timeout and output cap at the ceilings');
  // The ceilings themselves are checked, strictly.
  for (const maxLimits of [{ memoryMb: -1 }, { cpu: 0 }, { execTimeoutMs: 3_000_000_000 }, { outputBytes: 1.5 }, { gpus: 1 }]) {
    refused(t, () => parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', maxLimits }), 'invalid_config', /maxLimits/);
  }
});

t.test('with a persistent workspace HOME is a fresh tmpfs, unless the operator keeps it', async (t) => {
  const persistent = { id: 'c1', image: 'img', limits: { egress: 'none' }, workspace: { key: 'proj', durability: 'persistent' } };
  const plan = planSandbox(persistent, config, opts);
  t.same([plan.home, plan.env.HOME], ['/home/sandbox', '/home/sandbox']);
  refused(t, () => planSandbox({ ...persistent, env: { HOME: '/workspace' } }, config, opts), 'invalid_spec', /spec\.env\.HOME cannot be set with a persistent workspace.*persistentHome/);
  const kept = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', persistentHome: true });
  t.same([planSandbox(persistent, kept, opts).home, planSandbox(persistent, kept, opts).env.HOME], [undefined, undefined], 'opted in: the image\'s HOME');
  t.equal(planSandbox({ ...persistent, env: { HOME: '/workspace' } }, kept, opts).env.HOME, '/workspace');
  const ephemeral = planSandbox({ id: 'c1', image: 'img', limits: { egress: 'none' } }, config, opts);
  t.same([ephemeral.home, ephemeral.env.HOME], [undefined, undefined], 'an ephemeral workspace is this sandbox\'s own: the image\'s HOME');
});

t.test('a handle names a sandbox, never the egress proxy of one', async (t) => {
  t.equal(checkSandboxName('cap-c1'), 'cap-c1');
  t.equal(checkSandboxName('cap-c1-egressive'), 'cap-c1-egressive');
  for (const name of ['cap-c1-egress', 'c1', 'cap-', 'cap--x', 'cap-c1.x', 'CAP-c1']) refused(t, () => checkSandboxName(name), 'invalid_spec', /not a sandbox resource name/);
});
