/**
 * The pure parts of the operator's new verbs, without an engine: the command line of up, down,
 * create and run, the sandbox spec it becomes, run's refusal to reuse a sandbox that differs
 * from what was asked, where the endpoint comes from, and the socket proxy container's body,
 * drift check and socket directory check.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { parseOperatorArgs } from '../../../controller/operator/args.js';
import { egressTestHostsFromEnv, loadOperatorConfig } from '../../../controller/operator/operator-config.js';
import { optionMismatches, parseSandboxOptions, sandboxName, sandboxSpec } from '../../../controller/operator/sandbox-options.js';
import type { SandboxDetail } from '../../../controller/operator/sandbox-detail.js';
import {
  socketDirOfBinds, socketDirProblem, socketPathProblem, socketProxyBody, socketProxyDrift, type PathFacts, type SocketProxySettings,
} from '../../../controller/operator/socket-proxy-spec.js';
import { isSandboxError } from '../../../controller/index.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return isSandboxError(err) ? err.code : `not a SandboxError: ${String(err)}`;
  }
}

t.test('command lines of the new verbs', async (t) => {
  const rows: Array<{ name: string; argv: string[]; code?: string; check?: (a: ReturnType<typeof parseOperatorArgs>) => unknown; want?: unknown }> = [
    { name: 'run with options and a command', argv: ['run', 'demo', '--allow', 'a.example,b.example', '--allow', '*.c.example', '--cpu', '0.5', '--memory', '512', '--rm', '--', 'echo', 'hi'],
      check: (a) => [a.name, a.sandbox.allowHosts, a.sandbox.cpu, a.sandbox.memoryMb, a.remove, a.execCommand], want: ['cap-demo', ['a.example', 'b.example', '*.c.example'], 0.5, 512, true, "'echo' 'hi'"] },
    { name: 'a cap- name is kept', argv: ['create', 'cap-demo'], check: (a) => a.name, want: 'cap-demo' },
    { name: 'defaults of create', argv: ['create', 'demo'], check: (a) => [a.sandbox.egress, a.sandbox.image, [...a.sandbox.given]], want: ['allowlist', 'capybara-sandbox:latest', []] },
    { name: 'up defaults', argv: ['up'], check: (a) => [a.socketDir, a.proxyName, a.proxyImage], want: ['/run/capybara-sandbox', 'capybara-socket-proxy', 'capybara-sandbox-proxy:latest'] },
    { name: '--socket-dir is global', argv: ['--socket-dir', '/run/x', 'exec', 'demo', '--', 'ls'], check: (a) => a.socketDir, want: '/run/x' },
    { name: 'run without --', argv: ['run', 'demo'], code: 'invalid_config' },
    { name: 'run without a name', argv: ['run', '--', 'ls'], code: 'invalid_config' },
    { name: 'up with an argument', argv: ['up', 'now'], code: 'invalid_config' },
    { name: 'a socket proxy named like a sandbox (exec-able through itself)', argv: ['--proxy-name', 'cap-proxy', 'up'], code: 'invalid_config' },
    // Docker's container-name rule, /?[a-zA-Z0-9][a-zA-Z0-9_.-]+, and never cap- in any spelling of it.
    { name: 'a leading slash before cap- is still cap- to Docker', argv: ['--proxy-name', '/cap-x', 'up'], code: 'invalid_config' },
    { name: 'cap- in upper case', argv: ['--proxy-name', 'CAP-x', 'up'], code: 'invalid_config' },
    { name: 'a leading slash is dropped, as Docker does', argv: ['--proxy-name', '/my-proxy', 'up'], check: (a) => a.proxyName, want: 'my-proxy' },
    { name: 'a two-letter name', argv: ['--proxy-name', 'p1', 'down'], check: (a) => a.proxyName, want: 'p1' },
    { name: 'a one-letter name (Docker wants two)', argv: ['--proxy-name', 'p', 'up'], code: 'invalid_config' },
    { name: 'two leading slashes', argv: ['--proxy-name', '//proxy', 'up'], code: 'invalid_config' },
    { name: 'a slash inside', argv: ['--proxy-name', 'a/b', 'up'], code: 'invalid_config' },
    { name: 'a leading dot', argv: ['--proxy-name', '.proxy', 'up'], code: 'invalid_config' },
    { name: 'a blank', argv: ['--proxy-name', 'my proxy', 'up'], code: 'invalid_config' },
    { name: 'a colon', argv: ['--proxy-name', 'a:b', 'up'], code: 'invalid_config' },
    { name: 'non-ASCII', argv: ['--proxy-name', 'prøxy', 'up'], code: 'invalid_config' },
    { name: 'empty', argv: ['--proxy-name', '', 'up'], code: 'invalid_config' },
    { name: '-- after create', argv: ['create', 'demo', '--', 'ls'], code: 'invalid_config' },
    { name: '--allow on exec', argv: ['exec', 'demo', '--allow', 'a.example', '--', 'ls'], code: 'invalid_config' },
    { name: '--rm on create', argv: ['create', 'demo', '--rm'], code: 'invalid_config' },
    { name: 'unknown tier', argv: ['create', 'demo', '--egress', 'closed'], code: 'invalid_config' },
    { name: '--allow with another tier', argv: ['create', 'demo', '--egress', 'none', '--allow', 'a.example'], code: 'invalid_config' },
    { name: 'cpu not a number', argv: ['create', 'demo', '--cpu', 'two'], code: 'invalid_config' },
    { name: 'cpu zero', argv: ['create', 'demo', '--cpu', '0'], code: 'invalid_config' },
    { name: 'memory with a fraction', argv: ['create', 'demo', '--memory', '1.5'], code: 'invalid_config' },
    { name: 'bad workspace key (a usage error naming --workspace)', argv: ['create', 'demo', '--workspace', '../x'], code: 'invalid_config' },
    { name: 'an allowlist entry the controller refuses (a usage error naming --allow)', argv: ['create', 'demo', '--allow', 'https://pypi.org/'], code: 'invalid_config' },
    { name: 'bad sandbox name (a usage error)', argv: ['create', 'web 1'], code: 'invalid_config' },
  ];
  for (const row of rows) {
    if (row.code !== undefined) {
      t.equal(codeOf(() => parseOperatorArgs(row.argv)), row.code, row.name);
    } else {
      t.same(row.check?.(parseOperatorArgs(row.argv)), row.want, row.name);
    }
  }
});

t.test('after --, one word is a shell command line, several words an argv', async (t) => {
  const rows: { name: string; words: string[]; status: number; stdout: string }[] = [
    { name: 'one word is a shell line, as typed', words: ['echo a | tr a b; exit 3'], status: 3, stdout: 'b\n' },
    { name: 'sh -c with its script as one argument', words: ['sh', '-c', 'exit 7'], status: 7, stdout: '' },
    { name: 'python3 -c with parentheses', words: ['python3', '-c', 'print(1)'], status: 0, stdout: '1\n' },
    { name: 'words with quotes, dollars and spaces reach the program as they are', words: ['printf', '%s|', "it's", '$HOME', 'a b', ''], status: 0, stdout: "it's|$HOME|a b||" },
  ];
  for (const row of rows) {
    const command = parseOperatorArgs(['exec', 'demo', '--', ...row.words]).execCommand ?? '';
    // What the sandbox runs with it: bash -c (exec-script.ts).
    const ran = spawnSync('bash', ['-c', command], { encoding: 'utf8' });
    t.same([ran.status, ran.stdout], [row.status, row.stdout], `${row.name}: ${command}`);
  }
});

t.test('sandbox names and specs', async (t) => {
  t.equal(sandboxName('demo'), 'cap-demo');
  t.equal(sandboxName('cap-demo'), 'cap-demo');
  const all = parseSandboxOptions({ egress: 'allowlist', allow: ['a.example'], image: 'img:1', cpu: '2', memory: '256', workspace: 'proj' });
  t.same(sandboxSpec('cap-demo', all), {
    id: 'demo',
    image: 'img:1',
    limits: { egress: 'allowlist', allowHosts: ['a.example'], cpu: 2, memoryMb: 256 },
    workspace: { key: 'proj', durability: 'persistent' },
  });
  t.same(sandboxSpec('cap-x', parseSandboxOptions({ egress: 'none' })), { id: 'x', image: 'capybara-sandbox:latest', limits: { egress: 'none' } }, 'no allowlist outside the allowlist tier');
});

t.test('run reuses a sandbox only when the options typed agree', async (t) => {
  const existing: SandboxDetail = {
    name: 'cap-demo', state: 'running', tier: 'allowlist', image: 'capybara-sandbox:latest', allowHosts: ['a.example', 'b.example'],
    runtime: 'runc', egress: 'running', network: 'cap-demo-net', subnet: '10.213.0.16/28', volumes: ['cap-demo-workspace', 'cap-demo-skills'],
    limits: { nanoCpus: 1e9, memory: 1024 * 1024 * 1024, pidsLimit: 1024 },
  };
  const rows = [
    { name: 'nothing typed', raw: {}, mismatches: 0 },
    { name: 'same allowlist in another order and case', raw: { allow: ['B.example,a.example'] }, mismatches: 0 },
    { name: 'same limits', raw: { cpu: '1', memory: '1024' }, mismatches: 0 },
    { name: 'another allowlist', raw: { allow: ['a.example'] }, mismatches: 1 },
    { name: 'another tier', raw: { egress: 'none' }, mismatches: 1 },
    { name: 'another image', raw: { image: 'other:1' }, mismatches: 1 },
    { name: 'more cpu and memory', raw: { cpu: '2', memory: '2048' }, mismatches: 2 },
    { name: 'a workspace it does not mount', raw: { workspace: 'proj' }, mismatches: 1 },
  ];
  for (const row of rows) t.equal(optionMismatches(parseSandboxOptions(row.raw), existing).length, row.mismatches, row.name);
});

t.test('where the endpoint comes from', async (t) => {
  const env = { CAPYBARA_EXTENSION_CONFIG: JSON.stringify({ 'sandbox-docker': { endpoint: 'tcp://proxy:2375', network: 'cap-env' } }) };
  const rows = [
    { name: 'run, nothing configured: the socket of up, started on demand', argv: ['run', 'x', '--', 'ls'], env: {}, want: ['unix:///run/capybara-sandbox/docker.sock', true] },
    { name: 'run with --socket-dir', argv: ['--socket-dir', '/run/y', 'run', 'x', '--', 'ls'], env: {}, want: ['unix:///run/y/docker.sock', true] },
    { name: 'ls, nothing configured: the local engine', argv: ['ls'], env: {}, want: ['unix:///var/run/docker.sock', false] },
    { name: 'ls follows DOCKER_HOST', argv: ['ls'], env: { DOCKER_HOST: 'unix:///srv/docker.sock' }, want: ['unix:///srv/docker.sock', false] },
    { name: 'the host variable', argv: ['exec', 'x', '--', 'ls'], env, want: ['tcp://proxy:2375', false] },
    { name: '--endpoint wins', argv: ['--endpoint', 'unix:///a.sock', 'exec', 'x', '--', 'ls'], env, want: ['unix:///a.sock', false] },
    { name: 'up: the config names the socket it makes', argv: ['up'], env, want: ['unix:///run/capybara-sandbox/docker.sock', true] },
  ];
  for (const row of rows) {
    const loaded = loadOperatorConfig(parseOperatorArgs(row.argv), row.env);
    t.same([loaded.config.endpoint, loaded.proxyOnDemand], row.want, row.name);
  }
  t.equal(loadOperatorConfig(parseOperatorArgs(['ls']), env).config.network, 'cap-env', 'the rest of the host config is used too');
  const bad = [
    { name: 'not JSON', env: { CAPYBARA_EXTENSION_CONFIG: '{' } },
    { name: 'plugin key not an object', env: { CAPYBARA_EXTENSION_CONFIG: '{"sandbox-docker": 1}' } },
    { name: 'unknown key', env: { CAPYBARA_EXTENSION_CONFIG: '{"sandbox-docker": {"endpiont": "x"}}' } },
    { name: 'the plugin key misspelt', env: { CAPYBARA_EXTENSION_CONFIG: '{"sandbox_docker": {"runtime": "runsc", "allowedImages": ["capybara-sandbox:latest"]}}' } },
    { name: 'no plugin key at all', env: { CAPYBARA_EXTENSION_CONFIG: '{}' } },
  ];
  for (const row of bad) t.equal(codeOf(() => loadOperatorConfig(parseOperatorArgs(['ls']), row.env)), 'invalid_config', row.name);
  t.throws(() => loadOperatorConfig(parseOperatorArgs(['ls']), { CAPYBARA_EXTENSION_CONFIG: '{"sandbox_docker": {}}' }), {
    message: 'CAPYBARA_EXTENSION_CONFIG has no "sandbox-docker" key (its keys: "sandbox_docker"): write this plugin\'s deployment config under "sandbox-docker", give --config FILE, or unset the variable.',
  }, 'the error names the keys it found and what to do');
  t.equal(loadOperatorConfig(parseOperatorArgs(['ls']), { CAPYBARA_EXTENSION_CONFIG: '' }).config.runtime, 'runc', 'set but empty is unset: the defaults');
});

t.test('test hosts from the egress image variable', async (t) => {
  t.equal(egressTestHostsFromEnv({}), undefined);
  t.same(egressTestHostsFromEnv({ CAPYBARA_EGRESS_TEST_HOSTS: '{"a.test":"10.1.2.3"}' }), { 'a.test': '10.1.2.3' });
  for (const [name, value] of [['not JSON', '{'], ['a list', '["a"]'], ['a number value', '{"a.test": 1}']] as const) {
    t.equal(codeOf(() => egressTestHostsFromEnv({ CAPYBARA_EGRESS_TEST_HOSTS: value })), 'invalid_config', name);
  }
});

t.test('the socket proxy container', async (t) => {
  const s: SocketProxySettings = {
    name: 'capybara-socket-proxy', image: 'proxy:1', socketDir: '/run/capybara-sandbox', engineSocket: '/var/run/docker.sock', sharedNetwork: 'capybara-sandbox', volumeDriver: undefined,
    images: ['capybara-sandbox:latest', 'capybara-sandbox-egress:latest'], ceilings: { pids: 1024, memoryMb: 16384, cpus: 4 }, labels: {},
  };
  const body = socketProxyBody(s) as { Env: string[]; HostConfig: Record<string, unknown>; Labels: Record<string, string> };
  t.same(body.HostConfig.NetworkMode, 'none', 'no network: the socket is the only way in');
  t.same(body.HostConfig.CapDrop, ['ALL']);
  t.ok(body.Env.includes('SOCKET_PROXY_SHARED_NETWORK=capybara-sandbox'));
  t.ok(body.Env.includes('SOCKET_PROXY_VOLUME_DRIVERS='), 'no volume plugin: only the local driver');
  const withPlugin = socketProxyBody({ ...s, volumeDriver: 'quota' }) as { Env: string[] };
  t.ok(withPlugin.Env.includes('SOCKET_PROXY_VOLUME_DRIVERS=quota'), 'the controller\'s volumeDriver is the one plugin the proxy admits');
  t.same(body.HostConfig.LogConfig, { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } }, 'its own log is capped');
  t.ok(body.Env.includes('SOCKET_PROXY_IMAGES=capybara-sandbox:latest,capybara-sandbox-egress:latest'), 'the images the deployment runs, and no other');
  t.ok(body.Env.includes('SOCKET_PROXY_REGISTRIES='), 'nothing pulled from a registry');
  t.same(body.Env.filter((e) => e.startsWith('SOCKET_PROXY_MAX_')).sort(), ['SOCKET_PROXY_MAX_CPUS=4', 'SOCKET_PROXY_MAX_MEMORY=16384', 'SOCKET_PROXY_MAX_PIDS=1024'], 'the deployment\'s ceilings');
  t.equal(socketDirOfBinds(body.HostConfig.Binds as string[]), '/run/capybara-sandbox');
  const same = { imageId: 'sha256:1', env: [...body.Env, 'PATH=/usr/bin'], binds: body.HostConfig.Binds as string[], labels: body.Labels, memory: body.HostConfig.Memory as number };
  const rows = [
    { name: 'unchanged', existing: same, image: 'sha256:1', drift: 0 },
    { name: 'image rebuilt', existing: same, image: 'sha256:2', drift: 1 },
    { name: 'another shared network', existing: { ...same, env: same.env.filter((e) => !e.startsWith('SOCKET_PROXY_SHARED')) }, image: 'sha256:1', drift: 1 },
    { name: 'another image list', existing: { ...same, env: [...same.env.filter((e) => !e.startsWith('SOCKET_PROXY_IMAGES')), 'SOCKET_PROXY_IMAGES=x'] }, image: 'sha256:1', drift: 1 },
    { name: 'another memory ceiling', existing: { ...same, env: [...same.env.filter((e) => !e.startsWith('SOCKET_PROXY_MAX_MEMORY')), 'SOCKET_PROXY_MAX_MEMORY=1'] }, image: 'sha256:1', drift: 1 },
    { name: 'another volume plugin', existing: { ...same, env: [...same.env.filter((e) => !e.startsWith('SOCKET_PROXY_VOLUME')), 'SOCKET_PROXY_VOLUME_DRIVERS=x'] }, image: 'sha256:1', drift: 1 },
    { name: 'an older memory limit (256 MiB)', existing: { ...same, memory: 256 * 1024 * 1024 }, image: 'sha256:1', drift: 1 },
    { name: 'another socket directory', existing: { ...same, binds: ['/var/run/docker.sock:/var/run/docker.sock', '/tmp/x:/run/capybara-proxy'] }, image: 'sha256:1', drift: 1 },
  ];
  for (const row of rows) t.equal(socketProxyDrift(row.existing, s, row.image).length, row.drift, row.name);
});

t.test('the socket directory must be private to root', async (t) => {
  const dir = { isDirectory: true, isSymbolicLink: false, uid: 0, mode: 0o40700 };
  const rows = [
    { name: 'root, 0700', facts: dir, ok: true },
    { name: 'group may enter', facts: { ...dir, mode: 0o40710 }, ok: false },
    { name: 'others may enter', facts: { ...dir, mode: 0o40701 }, ok: false },
    { name: 'owned by a user', facts: { ...dir, uid: 1000 }, ok: false },
    { name: 'a symlink', facts: { ...dir, isSymbolicLink: true, isDirectory: false }, ok: false },
    { name: 'a file', facts: { ...dir, isDirectory: false }, ok: false },
  ];
  for (const row of rows) t.equal(socketDirProblem('/run/x', row.facts) === undefined, row.ok, row.name);
});

t.test('every directory above the socket must be root\'s and writable by no one else (StrictModes)', async (t) => {
  const dir = (path: string, over: Partial<PathFacts> = {}): PathFacts => ({ path, isDirectory: true, isSymbolicLink: false, uid: 0, mode: 0o40755, ...over });
  const rows: Array<{ name: string; chain: PathFacts[]; problem?: RegExp }> = [
    { name: 'root all the way', chain: [dir('/run/capybara-sandbox', { mode: 0o40700 }), dir('/run'), dir('/')] },
    { name: 'a parent a user owns', chain: [dir('/home/u/sock', { mode: 0o40700 }), dir('/home/u', { uid: 1000 }), dir('/home'), dir('/')], problem: /\/home\/u is owned by uid 1000/ },
    { name: 'a group-writable parent', chain: [dir('/srv/x/sock'), dir('/srv/x', { mode: 0o40775 }), dir('/')], problem: /\/srv\/x has mode 0775, writable by its group/ },
    { name: 'a sticky world-writable parent (/tmp)', chain: [dir('/tmp/x'), dir('/tmp', { mode: 0o41777 }), dir('/')], problem: /\/tmp has mode 1777, writable by its group/ },
    { name: 'an others-writable parent', chain: [dir('/srv/x'), dir('/srv', { mode: 0o40757 }), dir('/')], problem: /writable by others/ },
    { name: 'a root-owned symlink on the way (its mode is 0777 and means nothing)', chain: [dir('/var/run', { isSymbolicLink: true, isDirectory: false, mode: 0o120777 }), dir('/var'), dir('/')] },
    { name: 'a symlink a user owns', chain: [dir('/srv/link', { isSymbolicLink: true, isDirectory: false, uid: 1000, mode: 0o120777 }), dir('/srv'), dir('/')], problem: /owned by uid 1000/ },
  ];
  for (const row of rows) {
    const problem = socketPathProblem(row.chain);
    if (row.problem === undefined) t.equal(problem, undefined, row.name);
    else t.match(problem, row.problem, row.name);
  }
});
