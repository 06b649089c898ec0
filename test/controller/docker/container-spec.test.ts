import t, { type Test } from 'tap';
import { parseDeploymentConfig } from '../../../controller/spec/config.js';
import { planSandbox } from '../../../controller/spec/sandbox-plan.js';
import { egressContainerBody, sandboxBodyFromInspect, sandboxContainerBody } from '../../../controller/docker/container-spec.js';
import { internalNetworkBody, networkConnectBody, sharedNetworkBody } from '../../../controller/docker/network-spec.js';
import { volumeBody } from '../../../controller/docker/volume-spec.js';
import { serialiseAsciiBody } from '../../../controller/spec/ascii-body.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import type { SandboxSpec } from '../../../controller/spec/contract.js';

function throwsCode(t: Test, fn: () => unknown, code: string, mentions?: string): void {
  try {
    fn();
    t.fail(`expected ${code}`);
  } catch (err) {
    t.ok(isSandboxError(err), 'a SandboxError');
    t.equal((err as { code?: string }).code, code);
    if (mentions !== undefined) t.match((err as Error).message, mentions);
  }
}

const config = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375' });
const spec = (over: Partial<SandboxSpec> = {}, limits: Partial<SandboxSpec['limits']> = {}): SandboxSpec => ({
  id: 'conv1',
  image: 'capybara-sandbox:latest',
  limits: { egress: 'allowlist', allowHosts: ['example.com', '*.pypi.org'], cpu: 1.5, memoryMb: 512, ...limits },
  ...over,
});
const opts = { extraLabels: { 'test.run': 'x' } };
/** Network ids, as the create got them back from the engine. */
const NET_ID = 'c'.repeat(64);
const SHARED_ID = 'd'.repeat(64);

t.test('sandbox container carries every hardening flag', async (t) => {
  const body = sandboxContainerBody(planSandbox(spec(), config, opts), NET_ID);
  const hc = body.HostConfig;
  t.equal(body.User, '0:0');
  t.same(body.Cmd, ['sh', '-c', 'chmod 0700 /opt/capybara && exec sleep infinity'], 'root closes its own directory again at every start, then idles');
  t.equal(hc.Init, true);
  t.same(hc.CapDrop, ['ALL']);
  t.same(hc.SecurityOpt, ['no-new-privileges']);
  t.equal(hc.ReadonlyRootfs, true);
  t.equal(hc.PidsLimit, 1024);
  t.equal(hc.IpcMode, 'private');
  t.equal(hc.CgroupnsMode, 'private', 'cgroup v1 engines default to the host cgroup namespace');
  t.equal(hc.NanoCpus, 1.5e9);
  t.equal(hc.Memory, 512 * 1024 * 1024);
  t.equal(hc.MemorySwap, 512 * 1024 * 1024);
  t.equal(hc.Runtime, 'runc');
  t.equal(hc.NetworkMode, NET_ID, 'its internal network, by id');
  t.match((hc.Tmpfs as Record<string, string>)['/tmp'], /nosuid,nodev,size=268435456/);
  t.match((hc.Tmpfs as Record<string, string>)['/opt/capybara'], /mode=0700/);
  t.notOk('Privileged' in hc);
  t.notOk('Binds' in hc);
  t.same(hc.Mounts, [
    { Type: 'volume', Source: 'cap-conv1-workspace', Target: '/workspace', VolumeOptions: { NoCopy: true } },
    { Type: 'volume', Source: 'cap-conv1-skills', Target: '/skills', ReadOnly: true, VolumeOptions: { NoCopy: true } },
    { Type: 'volume', Source: 'cap-conv1-skills', Target: '/opt/capybara/skills', VolumeOptions: { NoCopy: true } },
  ]);
  t.equal(body.Labels['dev.capybara.sandbox'], '1');
  t.equal(body.Labels['dev.capybara.sandbox.name'], 'cap-conv1');
  t.equal(body.Labels['dev.capybara.sandbox.allow-hosts'], 'example.com,*.pypi.org');
  t.equal(body.Labels['test.run'], 'x');
  t.ok(body.Env.includes('HTTPS_PROXY=http://cap-conv1-egress:3128'));
  t.ok(body.Env.includes('https_proxy=http://cap-conv1-egress:3128'));
  t.ok(body.Env.includes('NO_PROXY=localhost,127.0.0.1,::1'));
  t.doesNotThrow(() => serialiseAsciiBody(body, 'test'));
  t.same(Object.keys(hc.Tmpfs as Record<string, string>).sort(), ['/opt/capybara', '/tmp'], 'an ephemeral workspace: no tmpfs HOME');
});

t.test('a persistent workspace gets HOME on a tmpfs, empty at every start', async (t) => {
  const body = sandboxContainerBody(planSandbox(spec({ workspace: { key: 'proj', durability: 'persistent' } }), config, opts), NET_ID);
  t.equal((body.HostConfig.Tmpfs as Record<string, string>)['/home/sandbox'], 'rw,exec,nosuid,nodev,size=268435456,mode=1777');
  t.ok(body.Env.includes('HOME=/home/sandbox'));
  t.same(body.HostConfig.Mounts, [
    { Type: 'volume', Source: 'cap-ws.proj', Target: '/workspace', VolumeOptions: { NoCopy: true } },
    { Type: 'volume', Source: 'cap-conv1-skills', Target: '/skills', ReadOnly: true, VolumeOptions: { NoCopy: true } },
    { Type: 'volume', Source: 'cap-conv1-skills', Target: '/opt/capybara/skills', VolumeOptions: { NoCopy: true } },
  ]);
});

const tiers: { name: string; egress: SandboxSpec['limits']['egress']; mode: string }[] = [
  { name: 'none has no network', egress: 'none', mode: 'none' },
  { name: 'internal has its own network, by id', egress: 'internal', mode: NET_ID },
  { name: 'open uses the shared bridge, by id', egress: 'open', mode: SHARED_ID },
];
for (const row of tiers) {
  t.test(row.name, async (t) => {
    const open = parseDeploymentConfig({ endpoint: 'tcp://p:1', allowOpenEgress: true });
    const body = sandboxContainerBody(planSandbox(spec({}, { egress: row.egress, allowHosts: [] }), open, opts), row.egress === 'open' ? SHARED_ID : row.egress === 'none' ? undefined : NET_ID);
    t.equal(body.HostConfig.NetworkMode, row.mode);
    t.notOk(body.Env.some((e) => e.startsWith('HTTP_PROXY=')));
  });
}

t.test('open egress refused unless allowed, naming the setting', async (t) => {
  throwsCode(t, () => planSandbox(spec({}, { egress: 'open' }), config, opts), 'open_egress_disabled', 'extensionConfig."sandbox-docker".allowOpenEgress');
});

const refusals: { name: string; spec: SandboxSpec; code: string }[] = [
  { name: 'non-ASCII image', spec: spec({ image: 'imäge' }), code: 'invalid_spec' },
  { name: 'non-ASCII env value', spec: spec({ env: { A: 'héllo' } }), code: 'invalid_spec' },
  { name: 'control character in env value', spec: spec({ env: { A: 'a\nb' } }), code: 'invalid_spec' },
  { name: 'bad env name', spec: spec({ env: { 'A-B': 'x' } }), code: 'invalid_spec' },
  { name: 'Unicode allowlist host', spec: spec({}, { allowHosts: ['bücher.de'] }), code: 'invalid_spec' },
  { name: 'allowlist host with a path', spec: spec({}, { allowHosts: ['a.com/x'] }), code: 'invalid_spec' },
  { name: 'id with a dot', spec: spec({ id: 'a.b' }), code: 'invalid_spec' },
  { name: 'id too long', spec: spec({ id: 'a'.repeat(53) }), code: 'invalid_spec' },
  { name: 'unknown tier', spec: spec({}, { egress: 'wide' as 'open' }), code: 'invalid_spec' },
  { name: 'cpu below granularity', spec: spec({}, { cpu: 0.001 }), code: 'limit_not_expressible' },
  { name: 'memory below Docker minimum', spec: spec({}, { memoryMb: 4 }), code: 'limit_not_expressible' },
  { name: 'disk without a volume driver', spec: spec({}, { diskMb: 100 }), code: 'limit_not_expressible' },
  { name: 'negative cpu', spec: spec({}, { cpu: -1 }), code: 'invalid_spec' },
];
for (const row of refusals) {
  t.test(`refused: ${row.name}`, async (t) => {
    throwsCode(t, () => planSandbox(row.spec, config, opts), row.code);
  });
}

t.test('disk limit with a volume driver sizes the workspace and /tmp', async (t) => {
  const withDriver = parseDeploymentConfig({ endpoint: 'tcp://p:1', volumeDriver: 'quota' });
  const plan = planSandbox(spec({}, { diskMb: 100 }), withDriver, opts);
  t.same(volumeBody(plan.workspaceVolume, plan.labels, plan.volumeDriver, plan.limits.volumeSize).DriverOpts, { size: '100M' });
  t.match((sandboxContainerBody(plan, NET_ID).HostConfig.Tmpfs as Record<string, string>)['/tmp'], `size=${100 * 1024 * 1024},`);
});

t.test('persistent workspace uses its own volume', async (t) => {
  const plan = planSandbox(spec({ workspace: { key: 'proj-1', durability: 'persistent' } }), config, opts);
  t.equal(plan.workspaceVolume, 'cap-ws.proj-1');
  t.equal(plan.persistentWorkspace?.labels['dev.capybara.sandbox.name'], undefined);
});

t.test('egress proxy body', async (t) => {
  const plan = planSandbox(spec(), config, opts);
  const body = egressContainerBody(plan, SHARED_ID, { 'upstream.test': '10.0.0.5' });
  t.equal(body.HostConfig.NetworkMode, SHARED_ID, 'created on the shared network, by id; the internal leg is connected after start');
  t.same(body.HostConfig.RestartPolicy, { Name: 'on-failure' }, 'a proxy process that dies (OOM) is restarted by the engine');
  t.same(body.Healthcheck, { Test: ['NONE'] }, 'the image\'s health check off: a node process every 10 s per sandbox');
  t.ok(body.Env.includes('EGRESS_ALLOW_HOSTS=example.com,*.pypi.org'));
  t.ok(body.Env.includes('CAPYBARA_EGRESS_TEST_HOSTS={"upstream.test":"10.0.0.5"}'));
  t.same(body.HostConfig.CapDrop, ['ALL']);
  t.equal(body.HostConfig.ReadonlyRootfs, true);
  t.equal(body.HostConfig.CgroupnsMode, 'private');
  t.notOk('User' in body);
  t.doesNotThrow(() => serialiseAsciiBody(body, 'test'));
});

t.test('both containers carry the whole hardening profile and capped logs', async (t) => {
  const capped = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', logMaxSizeMb: 20, logMaxFiles: 2 });
  const plan = planSandbox(spec(), capped, opts);
  const rows = [
    { name: 'sandbox', hc: sandboxContainerBody(plan, NET_ID).HostConfig },
    { name: 'egress proxy', hc: egressContainerBody(plan, SHARED_ID, undefined).HostConfig },
  ];
  for (const { name, hc } of rows) {
    t.same(
      [hc.CapDrop, hc.SecurityOpt, hc.ReadonlyRootfs, hc.IpcMode, hc.CgroupnsMode, hc.Init],
      [['ALL'], ['no-new-privileges'], true, 'private', 'private', true],
      `${name}: capabilities, no-new-privileges, read-only root, private IPC and cgroup namespaces, init`,
    );
    t.ok((hc.PidsLimit as number) > 0 && (hc.Memory as number) > 0 && hc.MemorySwap === hc.Memory, `${name}: pids and memory limits, no swap`);
    t.ok((hc.NanoCpus as number) > 0 && (hc.NanoCpus as number) <= capped.maxLimits.cpu * 1e9, `${name}: a CPU cap within the ceiling`);
    for (const [target, options] of Object.entries((hc.Tmpfs ?? {}) as Record<string, string>)) {
      t.ok(options.split(',').includes('nosuid') && options.split(',').includes('nodev'), `${name}: ${target} is nosuid,nodev`);
    }
    t.same(hc.LogConfig, { Type: 'json-file', Config: { 'max-size': '20m', 'max-file': '2' } }, `${name}: logs capped at the deployment's size and count`);
  }
  t.equal(egressContainerBody(plan, SHARED_ID, undefined).HostConfig.NanoCpus, 1e9, 'the egress proxy: one CPU');
  const small = parseDeploymentConfig({ endpoint: 'tcp://proxy:2375', maxLimits: { cpu: 0.5 } });
  t.equal(egressContainerBody(planSandbox(spec({}, { cpu: 0.5 }), small, opts), SHARED_ID, undefined).HostConfig.NanoCpus, 5e8,
    'the egress proxy under a CPU ceiling below one: the ceiling (the socket proxy refuses more)');
  t.same(egressContainerBody(planSandbox(spec(), config, opts), SHARED_ID, undefined).HostConfig.LogConfig,
    { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } }, 'the default caps: 10 MiB x 3');
});

t.test('network bodies', async (t) => {
  const shared = sharedNetworkBody('capybara-sandbox', { a: 'b' });
  t.same(shared.Options, { 'com.docker.network.bridge.enable_icc': 'false' });
  t.same(shared.Labels, { a: 'b', 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.shared-network': 'capybara-sandbox' }, 'labelled so that duplicates of its name can be found');
  t.notOk('IPAM' in shared, 'the shared network takes its subnet from the engine');
  const addresses = { subnet: '10.213.4.16/28', ipRange: '10.213.4.16/29', gateway: '10.213.4.17', egressAddress: '10.213.4.30' };
  const internal = internalNetworkBody('cap-x-net', { a: 'b' }, addresses);
  t.equal(internal.Internal, true);
  t.equal(internal.Driver, 'bridge');
  t.equal(internal.Options['com.docker.network.bridge.inhibit_ipv4'], 'true');
  t.same(internal.IPAM, { Config: [{ Subnet: '10.213.4.16/28', IPRange: '10.213.4.16/29', Gateway: '10.213.4.17' }] }, 'its subnet, dynamic addresses from the lower half, the gateway at its first address');
  t.equal(internal.Labels['dev.capybara.sandbox.subnet'], '10.213.4.16/28');
  t.same(networkConnectBody('cap-x-egress', '10.213.4.30'), { Container: 'cap-x-egress', EndpointConfig: { IPAMConfig: { IPv4Address: '10.213.4.30' } } }, 'the proxy at its fixed address');
  t.same(networkConnectBody('cap-x', undefined), { Container: 'cap-x' });
});

t.test('a sandbox on a network needs the network\'s id', async (t) => {
  throwsCode(t, () => sandboxContainerBody(planSandbox(spec(), config, opts), undefined), 'engine_error', 'network');
  t.same(sandboxContainerBody(planSandbox(spec(), config, opts), NET_ID).HostConfig.RestartPolicy, { Name: 'no' }, 'the sandbox itself is never restarted behind the controller');
});

t.test('serialiseAsciiBody refuses escapes', async (t) => {
  throwsCode(t, () => serialiseAsciiBody({ a: '\u0001' }, 'x'), 'invalid_spec');
  throwsCode(t, () => serialiseAsciiBody({ a: 'é' }, 'x'), 'invalid_spec');
});

t.test('a container rebuilt from inspect keeps every hardening field and mount', async (t) => {
  const original = sandboxContainerBody(planSandbox(spec(), config, opts), NET_ID);
  const inspected = {
    image: original.Image,
    user: original.User ?? '',
    cmd: original.Cmd ?? [],
    workingDir: original.WorkingDir ?? '',
    env: original.Env,
    labels: original.Labels,
    // Docker adds defaults to what it stores; they must not be copied back.
    // A container created before the controller set CgroupnsMode records the engine's `host`, and
    // one created before it capped logs the engine's uncapped default.
    hostConfig: { ...original.HostConfig, Binds: null, Privileged: false, CgroupnsMode: 'host',
      LogConfig: { Type: 'json-file', Config: {} },
      Mounts: (original.HostConfig.Mounts as object[]).map((m) => ({ ...m, VolumeOptions: {} })) },
  };
  const rebuilt = sandboxBodyFromInspect(inspected, config, NET_ID);
  t.same(rebuilt, original);
  t.doesNotThrow(() => serialiseAsciiBody(rebuilt, 'test'));
  const moved = sandboxBodyFromInspect(inspected, config, 'e'.repeat(64));
  t.same(moved, { ...original, HostConfig: { ...original.HostConfig, NetworkMode: 'e'.repeat(64) } }, 'rebuilt on the network it has now, by id');
});

t.test('transparent egress: an allowlist sandbox resolves through its own egress proxy, no other tier resolves at all', async (t) => {
  const open = parseDeploymentConfig({ endpoint: 'tcp://p:1', allowOpenEgress: true });
  const ADDRESS = '10.213.7.30';
  const allowlist = planSandbox(spec(), open, opts);
  const sandbox = sandboxContainerBody(allowlist, NET_ID, ADDRESS);
  t.same(sandbox.HostConfig.Dns, [ADDRESS], 'the name server is the proxy\'s fixed address on the sandbox\'s network');
  for (const key of ['DnsOptions', 'DnsSearch', 'ExtraHosts']) t.notOk(key in sandbox.HostConfig, `no ${key}`);
  t.ok(sandbox.Env.some((e) => e.startsWith('HTTPS_PROXY=')), 'the proxy variables stay set');
  // Another tier never gets a name server, whatever the caller passes.
  const rows: Array<{ egress: SandboxSpec['limits']['egress']; network: string | undefined }> = [
    { egress: 'none', network: undefined },
    { egress: 'internal', network: NET_ID },
    { egress: 'open', network: SHARED_ID },
  ];
  for (const row of rows) {
    const body = sandboxContainerBody(planSandbox(spec({}, { egress: row.egress, allowHosts: [] }), open, opts), row.network, ADDRESS);
    t.notOk('Dns' in body.HostConfig, `${row.egress}: no name server`);
  }
  t.notOk('Dns' in sandboxContainerBody(allowlist, NET_ID).HostConfig, 'a network without a fixed address (made before the address pool): the explicit proxy alone');

  const egress = egressContainerBody(allowlist, SHARED_ID, undefined, ADDRESS);
  t.ok(egress.Env.includes(`EGRESS_TRANSPARENT_LISTEN=${ADDRESS}`), 'the proxy listens in transparent mode on that address only');
  t.ok(egress.Env.includes('EGRESS_LISTEN=0.0.0.0:3128'), 'and still on 3128');
  t.notOk(egress.Env.some((e) => e.startsWith('EGRESS_TRANSPARENT_ANSWER=') || e.startsWith('EGRESS_TRANSPARENT_PORT_MAP=')), 'answers with the address it listens on, on the ports themselves');
  t.notOk(egressContainerBody(allowlist, SHARED_ID, undefined).Env.some((e) => e.startsWith('EGRESS_TRANSPARENT_')), 'no fixed address, no transparent mode');
  t.doesNotThrow(() => serialiseAsciiBody(sandbox, 'test'));
  t.doesNotThrow(() => serialiseAsciiBody(egress, 'test'));
});

t.test('a sandbox rebuilt from inspect takes the name server of the network it is on now', async (t) => {
  const original = sandboxContainerBody(planSandbox(spec(), config, opts), NET_ID, '10.213.7.30');
  const inspected = {
    image: original.Image, user: original.User ?? '', cmd: original.Cmd ?? [], workingDir: original.WorkingDir ?? '',
    env: original.Env, labels: original.Labels, hostConfig: { ...original.HostConfig },
  };
  t.same(sandboxBodyFromInspect(inspected, config, NET_ID, '10.213.7.30'), original, 'the same network: the same body');
  t.same(sandboxBodyFromInspect(inspected, config, 'e'.repeat(64), '10.213.9.14').HostConfig.Dns, ['10.213.9.14'], 'a rebuilt network has another subnet: never the old address copied');
  t.notOk('Dns' in sandboxBodyFromInspect(inspected, config, 'e'.repeat(64)).HostConfig, 'none without a proxy address');
});
