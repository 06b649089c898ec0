/**
 * What the controller does about the values dockerd acts on (SECURITY.md, section 2), on the
 * in-memory engine: the workspace volume handed to the sandbox user before a create returns (its
 * mounts carry NoCopy, so nothing else gives it to uid 1000), a persistent workspace held by one
 * running sandbox at a time unless the deployment shares them, networks reused only with the
 * options that keep sandboxes apart, and an image the socket proxy refuses named with the setting
 * that admits it. The real-engine counterparts are in test/haproxy/engine-values.test.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { isSandboxError, type SandboxSpec } from '../../../controller/index.js';
import { EngineStatusError } from '../../../controller/docker/engine.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

const SHARED = 'capybara-sandbox';
const spec = (id: string, more: Partial<SandboxSpec> = {}): SandboxSpec => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'] }, ...more });
const persistent = (id: string) => spec(id, { workspace: { key: 'proj', durability: 'persistent' } });

/**
 * The calls on sandbox `id`'s container and its hand-over container, in order, of `methods`; the
 * hand-over container's marked `(hand-over)`.
 */
function callsOf(s: ReturnType<typeof fakeSandbox>, id: string, methods: readonly string[], from = 0): string[] {
  return s.engine.calls
    .slice(from)
    .filter((c) => (c.target === `cap-${id}` || c.target === `cap-${id}.handover`) && methods.includes(c.method))
    .map((c) => (c.target === `cap-${id}` ? c.method : `${c.method} (hand-over)`));
}
const HAND_OVER = ['createContainer (hand-over)', 'giveWorkspaceToSandboxUser (hand-over)', 'removeContainer (hand-over)'];
const SEEN = ['createContainer', 'giveWorkspaceToSandboxUser', 'startContainer', 'startExec', 'removeContainer'];

t.test('the workspace volume is handed to the sandbox user before the create returns, once the sandbox\'s container is made', async (t) => {
  const none = (id: string): SandboxSpec => ({ ...spec(id), limits: { egress: 'none' } });
  const ownOf = (calls: readonly string[]): string[] => calls.filter((c) => !c.endsWith('(hand-over)'));
  const handOverOf = (calls: readonly string[]): string[] => calls.filter((c) => c.endsWith('(hand-over)'));
  for (const [what, s0, own] of [
    ['ephemeral', spec('w1'), ['removeContainer', 'createContainer', 'startContainer', 'startExec']],
    ['persistent', persistent('w1'), ['removeContainer', 'createContainer', 'startContainer', 'startExec']],
    ['no proxy', none('w1'), ['removeContainer', 'createContainer', 'startContainer']],
  ] as const) {
    const s = fakeSandbox();
    await s.provider.create(s0);
    const volume = what === 'persistent' ? 'cap-ws.proj' : 'cap-w1-workspace';
    t.ok(s.engine.sandboxUserVolumes.has(volume), `${what}: ${volume} is the sandbox user's`);
    const calls = callsOf(s, 'w1', SEEN);
    // A create first clears what an earlier one of the same id may have left (both containers).
    t.same([ownOf(calls), handOverOf(calls)], [own, ['removeContainer (hand-over)', ...HAND_OVER]], `${what}: through a container of its own, removed after`);
    t.ok(calls.indexOf('createContainer (hand-over)') > calls.indexOf('createContainer'), `${what}: after the sandbox's container was made (a create racing on the id stops there)`);
    t.notOk(s.engine.containers.has('cap-w1.handover'), `${what}: no hand-over container left`);
  }
});

t.test('the workspace is handed over while the sandbox starts, not after', async (t) => {
  for (const [id, s0] of [['w3', spec('w3')], ['w4', persistent('w4')]] as const) {
    const s = fakeSandbox();
    const handed = (): boolean => s.engine.count('giveWorkspaceToSandboxUser', `cap-${id}.handover`) > 0;
    let handedBeforeStartEnded = false;
    const start = s.engine.startContainer.bind(s.engine);
    s.engine.startContainer = async (name: string) => {
      if (name === `cap-${id}`) {
        // The start ends once the hand-over has begun, or after half a second.
        for (let i = 0; i < 50 && !handed(); i++) await sleep(10);
        handedBeforeStartEnded = handed();
      }
      return start(name);
    };
    await s.provider.create(s0);
    t.ok(handedBeforeStartEnded, `${id}: the archive put began before the sandbox's start ended`);
  }
});

t.test('the hand-over container holds the workspace volume alone, of the sandbox\'s image, with no network, never started', async (t) => {
  const s = fakeSandbox();
  let seen: unknown;
  const original = s.engine.giveWorkspaceToSandboxUser.bind(s.engine);
  s.engine.giveWorkspaceToSandboxUser = async (name: string) => {
    seen = structuredClone(s.engine.containers.get(name));
    return original(name);
  };
  await s.provider.create(spec('w8'));
  const helper = seen as { state: string; body: { Image: string; HostConfig: { NetworkMode: string; Mounts: unknown[]; ReadonlyRootfs: boolean; CapDrop: string[] } } };
  t.equal(helper.body.Image, IMAGES.sandbox, 'the sandbox\'s own image');
  t.same(helper.body.HostConfig.Mounts, [{ Type: 'volume', Source: 'cap-w8-workspace', Target: '/workspace', VolumeOptions: { NoCopy: true } }]);
  t.same([helper.body.HostConfig.NetworkMode, helper.body.HostConfig.ReadonlyRootfs, helper.body.HostConfig.CapDrop], ['none', true, ['ALL']]);
  t.not(helper.state, 'running', 'never started');
});

t.test('a hand-over container left behind is removed and made again; destroy removes one too', async (t) => {
  const s = fakeSandbox();
  const leftover = { Image: 'capybara-sandbox-egress:latest', HostConfig: { Mounts: [{ Type: 'volume', Source: 'cap-w9-workspace', Target: '/workspace' }] } };
  await s.provider.create(spec('w9'));
  // A rebuild's hand-over meets one left by a controller that died in between.
  await s.provider.suspend({ id: 'cap-w9' });
  await s.engine.removeContainer('cap-w9-egress');
  await s.engine.removeNetwork('cap-w9-net');
  await s.engine.createContainer('cap-w9.handover', leftover);
  s.engine.sandboxUserVolumes.clear();
  t.equal(await s.provider.resume({ id: 'cap-w9' }), 'running');
  t.ok(s.engine.sandboxUserVolumes.has('cap-w9-workspace'), 'handed over');
  t.notOk(s.engine.containers.has('cap-w9.handover'), 'and removed');
  await s.engine.createContainer('cap-w9.handover', leftover);
  await s.provider.destroy({ id: 'cap-w9' });
  t.same([...s.engine.containers.keys()].filter((n) => n.startsWith('cap-w9')), [], 'destroy leaves no hand-over container');
  t.notOk(s.engine.volumes.has('cap-w9-workspace'), 'nor the workspace it held');
});

t.test('a hand-over container removed under the hand-over (another call destroying the sandbox) is a conflict, nothing left', async (t) => {
  const s = fakeSandbox();
  const give = s.engine.giveWorkspaceToSandboxUser.bind(s.engine);
  s.engine.giveWorkspaceToSandboxUser = async (name: string) => {
    // Removed while dockerd extracts: it answers as it happens to, here 500.
    await s.engine.removeContainer(name);
    await give(name).catch(() => undefined);
    throw Object.assign(new Error('RWLayer of container is unexpectedly nil'), { statusCode: 500 });
  };
  const err = await s.provider.create(spec('w2')).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.same([...s.engine.containers.keys()].filter((n) => n.startsWith('cap-w2')), [], 'nothing left');
});

t.test('with a volume driver, the hand-over comes before the start', async (t) => {
  const s = fakeSandbox({ volumeDriver: 'quota' });
  s.engine.volumeDrivers.add('quota');
  await s.provider.create(spec('w5'));
  t.ok(s.engine.sandboxUserVolumes.has('cap-w5-workspace'), 'the workspace is the sandbox user\'s');
  t.same(callsOf(s, 'w5', ['createContainer', 'giveWorkspaceToSandboxUser', 'startContainer']), ['createContainer', 'createContainer (hand-over)', 'giveWorkspaceToSandboxUser (hand-over)', 'startContainer'], 'a running container\'s plugin volume is never mounted again');
});

t.test('a persistent workspace made on a volume plugin keeps the hand-over before the start after the config drops the driver', async (t) => {
  const s = fakeSandbox({ volumeDriver: 'quota' });
  s.engine.volumeDrivers.add('quota');
  await s.provider.create(persistent('w6'));
  await s.provider.destroy({ id: 'cap-w6' });
  t.equal((s.engine.volumes.get('cap-ws.proj')?.body as { Driver?: string }).Driver, 'quota', 'the kept workspace is the plugin\'s');
  const later = s.withConfig({ volumeDriver: '' });
  const before = s.engine.calls.length;
  await later.create(persistent('w7'));
  t.same(callsOf(s, 'w7', ['giveWorkspaceToSandboxUser', 'startContainer'], before), ['giveWorkspaceToSandboxUser (hand-over)', 'startContainer'], 'the volume\'s own driver decides, not the config');
});

t.test('a hand-over that fails fails the create and leaves nothing behind', async (t) => {
  for (const probe of ['passes', 'fails'] as const) {
    const s = fakeSandbox();
    s.engine.failOnce('giveWorkspaceToSandboxUser', 'cap-w3.handover', 500, 'no space left on device');
    if (probe === 'fails') s.engine.onExec = (container, request) => (request.cmd.join('\n').includes('/dev/tcp/') ? { exitCode: 137 } : s.engine.defaultExec(container, request));
    const err = await s.provider.create(spec('w3')).catch((e: unknown) => e);
    t.match(String(err), /no space left on device/, `probe ${probe}: the hand-over's error is the create error`);
    t.same([...s.engine.containers.keys()].filter((n) => n.startsWith('cap-w3')), [], `probe ${probe}: no container left`);
    t.same([...s.engine.volumes.keys()].filter((n) => n.startsWith('cap-w3')), [], `probe ${probe}: no volume left`);
  }
});

t.test('a container rebuilt on a recreated network gets its workspace handed over again', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(spec('w2'));
  await s.provider.suspend({ id: 'cap-w2' });
  await s.engine.removeContainer('cap-w2-egress');
  await s.engine.removeNetwork('cap-w2-net');
  s.engine.sandboxUserVolumes.clear();
  t.equal(await s.provider.resume({ id: 'cap-w2' }), 'running');
  t.ok(s.engine.sandboxUserVolumes.has('cap-w2-workspace'), 'handed over before the rebuilt container started');
});

t.test('a persistent workspace is held by one running sandbox at a time', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(persistent('p1'));
  t.equal(s.engine.containers.get('cap-p1')?.body.Labels?.['dev.capybara.sandbox.workspace'], 'proj', 'the sandbox names its workspace');
  const err = await s.provider.create(persistent('p2')).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'workspace_in_use'), String(err));
  t.match((err as Error).message, /cap-p1.*sharedWorkspaces/s, 'names the holder and the setting');
  t.same([...s.engine.containers.keys()].filter((n) => n.startsWith('cap-p2')), [], 'the refused create left nothing behind');
  t.equal(s.engine.containers.get('cap-p1')?.state, 'running', 'the holder runs on');

  await s.provider.suspend({ id: 'cap-p1' });
  await s.provider.create(persistent('p2'));
  t.equal(s.engine.containers.get('cap-p2')?.state, 'running', 'once the holder is stopped, another sandbox may take it');
  const back = await s.provider.resume({ id: 'cap-p1' }).catch((e: unknown) => e);
  t.ok(isSandboxError(back, 'workspace_in_use'), `and the first one cannot start while it is held: ${String(back)}`);
  t.equal(s.engine.containers.get('cap-p1')?.state, 'exited', 'it stays stopped');
  const auto = await s.provider.exec({ id: 'cap-p1' }, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(auto, 'workspace_in_use'), 'nor by the auto-start of a command');
});

t.test('sharedWorkspaces lets several running sandboxes mount one workspace', async (t) => {
  const s = fakeSandbox({ sharedWorkspaces: true });
  await s.provider.create(persistent('q1'));
  await s.provider.create(persistent('q2'));
  t.same(['cap-q1', 'cap-q2'].map((n) => s.engine.containers.get(n)?.state), ['running', 'running']);
  t.equal(s.engine.count('listRunningContainers'), 0, 'nobody is asked');
});

t.test('a shared network that lets containers talk to each other is not used', async (t) => {
  for (const [what, body] of [
    ['inter-container traffic on', { Name: SHARED }],
    ['enable_icc "true"', { Name: SHARED, Options: { 'com.docker.network.bridge.enable_icc': 'true' } }],
    ['internal (no way out)', { Name: SHARED, Internal: true, Options: { 'com.docker.network.bridge.enable_icc': 'false' } }],
  ] as const) {
    const s = fakeSandbox();
    s.engine.putNetwork('operators', body);
    const err = await s.provider.create(spec('n1')).catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'network_not_isolated'), `${what}: ${String(err)}`);
    t.match((err as Error).message, `docker network rm ${SHARED}`, `${what}: says how to remove it`);
    t.same([...s.engine.containers.keys()], [], `${what}: no container was made`);
  }
});

t.test('a sandbox network changed behind the controller\'s back is not reused by recovery', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(spec('n2'));
  await s.provider.suspend({ id: 'cap-n2' });
  await s.engine.removeContainer('cap-n2-egress');
  await s.engine.removeNetwork('cap-n2-net');
  // Made again by someone else under the name, with the sandbox's labels but a route out.
  s.engine.putNetwork('open-net', { Name: 'cap-n2-net', Labels: { 'dev.capybara.test': 'fake', 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': 'cap-n2' } });
  const err = await s.provider.resume({ id: 'cap-n2' }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'network_not_isolated'), String(err));
  t.match((err as Error).message, /not internal.*capybara-sandbox destroy cap-n2/s);
  t.not(s.engine.containers.get('cap-n2')?.state, 'running', 'the sandbox did not start on it');
});

t.test('an image the socket proxy refuses: image_unavailable, naming the settings that admit it', async (t) => {
  for (const reason of ['image_not_allowed', 'registry_not_allowed:registry.example.com']) {
    const s = fakeSandbox();
    s.engine.beforeCall((call) => {
      if (call.method === 'createContainer' && call.target === 'cap-i1') {
        throw new EngineStatusError('engine_refused', 403, `The socket proxy refused create of container cap-i1 (403): denied by the Docker socket proxy: ${reason}`, undefined, true);
      }
    });
    const err = await s.provider.create(spec('i1')).catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'image_unavailable'), `${reason}: ${String(err)}`);
    t.match((err as Error).message, new RegExp(`${reason}.*SOCKET_PROXY_IMAGES.*SOCKET_PROXY_REGISTRIES`, 's'));
    t.equal(s.engine.count('pullImage'), 0, `${reason}: no pull is tried`);
  }
  // An image of a listed registry, refused for its volume: listing the registry again is no answer.
  const s = fakeSandbox();
  s.engine.beforeCall((call) => {
    if (call.method === 'createContainer' && call.target === 'cap-i2') {
      throw new EngineStatusError('engine_refused', 403, 'The socket proxy refused create of container cap-i2 (403): denied by the Docker socket proxy: mount_image_not_listed:/workspace', undefined, true);
    }
  });
  const err = await s.provider.create(spec('i2')).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'image_unavailable'), String(err));
  t.match((err as Error).message, /mount_image_not_listed:\/workspace.*listed by name in the proxy's SOCKET_PROXY_IMAGES.*SOCKET_PROXY_REGISTRIES is not enough/s);
  t.equal(s.engine.count('pullImage'), 0, 'no pull is tried');
  // An image that declares a VOLUME: what to do about the image, and no pull.
  const v = fakeSandbox();
  v.engine.beforeCall((call) => {
    if (call.method === 'createContainer' && call.target === 'cap-i3') {
      throw new EngineStatusError('engine_refused', 403, 'The socket proxy refused create of container cap-i3 (403): denied by the Docker socket proxy: mount_image_volume:/data', undefined, true);
    }
  });
  const volumeErr = await v.provider.create(spec('i3')).catch((e: unknown) => e);
  t.ok(isSandboxError(volumeErr, 'image_unavailable'), String(volumeErr));
  t.match((volumeErr as Error).message, /mount_image_volume:\/data.*declares a VOLUME of its own.*without VOLUME lines/s);
  t.equal(v.engine.count('pullImage'), 0, 'no pull is tried');
});
