/**
 * Recovery (controller/sandbox/recovery.ts) branch by branch, on the in-memory engine: resume,
 * and the auto-start before commands and file operations, with the network gone, the egress
 * proxy missing, stopped or paused, the container paused or stopped, a start that fails, a
 * change made meanwhile by someone else, and concurrent callers. The real-engine counterparts
 * (docker-sandbox.test.ts) show the same on Docker; these reach every branch, fast.
 */
import t from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { EGRESS_ENV, IMAGES, registrationArchive } from '../../../common/index.js';
import { destroyedDuringProbe, fakeSandbox, FAKE_LABELS } from '../../support/fake-sandbox.js';

const ID = 'r1';
const NAME = `cap-${ID}`;
const EGRESS = `${NAME}-egress`;
const NET = `${NAME}-net`;
const SHARED = 'capybara-sandbox';
const allowlist = { id: ID, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts: ['example.com', '*.pypi.org'] } };
const internal = { id: ID, image: IMAGES.sandbox, limits: { egress: 'internal' as const } };

async function created(spec: object = allowlist, config = {}) {
  const s = fakeSandbox(config);
  await s.provider.create(spec as typeof allowlist);
  return s;
}

/** Stops both containers, as a host restart or `suspend` leaves them. */
async function stopBoth(s: Awaited<ReturnType<typeof created>>) {
  await s.engine.stopContainer(NAME, 0);
  await s.engine.stopContainer(EGRESS, 0);
}

const state = (s: Awaited<ReturnType<typeof created>>, name: string) => s.engine.containers.get(name)?.state ?? 'missing';

t.test('resume of a sandbox whose container is gone says gone and changes nothing', async (t) => {
  const s = fakeSandbox();
  t.equal(await s.provider.resume({ id: NAME }), 'gone');
  t.same(s.engine.calls.map((c) => c.method), ['inspectContainer']);
});

t.test('resume starts a stopped sandbox and its stopped proxy, and waits for the proxy', async (t) => {
  const s = await created();
  await stopBoth(s);
  const before = s.engine.calls.length;
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.equal(state(s, NAME), 'running');
  t.equal(state(s, EGRESS), 'running');
  const calls = s.engine.calls.slice(before).map((c) => `${c.method} ${c.target}`);
  t.notOk(calls.some((c) => c.startsWith('createContainer') || c.startsWith('createNetwork')), 'nothing rebuilt');
  t.ok(calls.includes(`startExec ${NAME}`), 'the health probe ran in the sandbox');
});

t.test('a missing egress proxy is rebuilt from the labels and the current config', async (t) => {
  const s = await created();
  await stopBoth(s);
  await s.engine.removeContainer(EGRESS);
  // The shared network went too, and the deployment changed its proxy image and shared network since.
  await s.engine.removeNetwork(SHARED);
  s.engine.images.add('capybara-sandbox-egress:next');
  const next = s.withConfig({ egressProxyImage: 'capybara-sandbox-egress:next', network: 'capybara-next' });
  const probes: string[] = [];
  s.engine.onExec = (container, request) => {
    if (request.cmd.join('\n').includes('/dev/tcp/')) probes.push(request.cmd.join('\n'));
    return s.engine.defaultExec(container, request);
  };
  t.equal(await next.resume({ id: NAME }), 'running');
  t.match(probes, [`lifecycle=${s.engine.registration(NAME)?.lifecycle ?? 'none'}`], 'the resume waited until the rebuilt proxy named its registration');
  const proxy = s.engine.containers.get(EGRESS);
  t.ok(proxy, 'rebuilt');
  t.equal(proxy?.body.Image, 'capybara-sandbox-egress:next', 'the image of the current config');
  t.equal(proxy?.body.HostConfig?.NetworkMode, s.engine.networkNamed('capybara-next')?.id, 'the shared network of the current config, by id');
  t.ok(s.engine.networkNamed('capybara-next'), 'which is created when missing');
  t.same(s.engine.registration(NAME)?.policy.allowHosts, ['example.com', '*.pypi.org'], 'the allowlist its registration volume kept');
  t.notOk(proxy?.body.Env?.some((e) => e.startsWith(`${EGRESS_ENV.allowHosts}=`)), 'read from the registration, not the environment');
  t.same(proxy?.body.Labels, { ...FAKE_LABELS, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': NAME, 'dev.capybara.sandbox.role': 'egress' }, 'resource labels, not the tier or the allowlist');
  t.ok(s.engine.reachable(NAME, EGRESS), 'on the sandbox network again');
  t.match(s.logs.find((l) => /egress proxy missing/.test(l.msg)), { sandbox: NAME });
});

t.test('a removed internal network is recreated, and the proxy and the container with it', async (t) => {
  const s = await created();
  const oldIds = [s.engine.containers.get(NAME)?.id, s.engine.containers.get(EGRESS)?.id];
  await stopBoth(s);
  await s.engine.removeNetwork(NET);
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.ok(s.engine.networkNamed(NET));
  t.match(s.engine.networkNamed(NET)?.body.Labels, { ...FAKE_LABELS, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': NAME, 'dev.capybara.sandbox.subnet': /^10\.213\./ }, 'labelled as a resource of the sandbox, with its subnet');
  t.not(s.engine.containers.get(NAME)?.id, oldIds[0], 'the container was recreated: it was bound to the old network');
  t.not(s.engine.containers.get(EGRESS)?.id, oldIds[1], 'so was the proxy');
  t.equal(s.engine.containers.get(NAME)?.body.HostConfig?.CgroupnsMode, 'private');
  t.ok(s.engine.reachable(NAME, EGRESS));
});

t.test('an internal sandbox without its network: network and container rebuilt, no proxy', async (t) => {
  const s = await created(internal);
  await s.engine.stopContainer(NAME, 0);
  await s.engine.removeNetwork(NET);
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0, 'the auto-start before exec recovers it');
  t.equal(state(s, NAME), 'running');
  t.equal(s.engine.count('inspectContainer', EGRESS), 0, 'no proxy looked for');
  t.equal(s.engine.count('startExec', EGRESS), 0);
});

t.test('a network recreated by another replica meanwhile: the start fails 404 and the container is rebuilt', async (t) => {
  const s = await created(internal);
  await s.engine.stopContainer(NAME, 0);
  await s.engine.removeNetwork(NET);
  await s.engine.createNetwork({
    Name: NET, CheckDuplicate: true, Internal: true, Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' }, Labels: { 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': NAME },
  } as { Name: string });
  const old = s.engine.containers.get(NAME)?.id;
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.not(s.engine.containers.get(NAME)?.id, old);
  t.equal(s.engine.count('createNetwork', NET), 2, 'the network was not made again');
});

t.test('a failed start for another reason is the error', async (t) => {
  const s = await created(internal);
  await s.engine.stopContainer(NAME, 0);
  s.engine.failOnce('startContainer', NAME, 500, 'OCI runtime create failed');
  const err = await s.provider.resume({ id: NAME }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'engine_error'), String(err));
  t.equal(state(s, NAME), 'exited', 'nothing else was tried');
});

t.test('a paused sandbox is unpaused, not started', async (t) => {
  const s = await created();
  await s.engine.pauseContainer(NAME);
  const before = s.engine.calls.length;
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0);
  t.equal(state(s, NAME), 'running');
  const calls = s.engine.calls.slice(before).map((c) => `${c.method} ${c.target}`);
  t.ok(calls.includes(`unpauseContainer ${NAME}`));
  t.notOk(calls.includes(`startContainer ${NAME}`), 'no start after the unpause');
  t.ok(s.logs.some((l) => l.msg === 'sandbox not running, starting it'));
});

t.test('a sandbox stopped while it was being unpaused is started', async (t) => {
  const s = await created(internal);
  await s.engine.pauseContainer(NAME);
  let unpaused = false;
  s.engine.beforeCall(async (call) => {
    if (call.method === 'unpauseContainer' && call.target === NAME) unpaused = true;
    // `docker stop` lands between the unpause and the check after it.
    else if (unpaused && call.method === 'inspectContainer' && call.target === NAME) {
      unpaused = false;
      const c = s.engine.containers.get(NAME);
      if (c !== undefined) c.state = 'exited';
    }
  });
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.equal(state(s, NAME), 'running');
  t.equal(s.engine.count('startContainer', NAME), 2, 'the create, then this start');
});

t.test('a stopped or paused proxy of a running sandbox is brought back before a command', async (t) => {
  for (const [how, expect] of [['stopped', 'startContainer'], ['paused', 'unpauseContainer']] as const) {
    const s = await created();
    if (how === 'stopped') await s.engine.stopContainer(EGRESS, 0);
    else await s.engine.pauseContainer(EGRESS);
    const before = s.engine.count(expect, EGRESS);
    t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0, how);
    t.equal(state(s, EGRESS), 'running', `${how}: running again`);
    t.equal(s.engine.count(expect, EGRESS), before + 1, `${how}: ${expect}`);
    t.ok(s.logs.some((l) => l.msg === 'egress proxy not running, recovering it'), `${how}: said why`);
  }
});

t.test('a running sandbox is not touched before a command', async (t) => {
  for (const spec of [allowlist, internal, { ...internal, limits: { egress: 'none' as const } }]) {
    const s = await created(spec);
    const before = s.engine.calls.length;
    await s.provider.exec({ id: NAME }, 'true');
    const methods = new Set(s.engine.calls.slice(before).map((c) => c.method));
    // The allowlist proxy's registration is read (inspectNetwork, and an exec in the proxy).
    t.same([...methods].sort(), spec === allowlist ? ['inspectContainer', 'inspectNetwork', 'startExec'] : ['inspectContainer', 'startExec'], spec.limits.egress);
  }
});

t.test('concurrent commands on a stopped sandbox share one recovery', async (t) => {
  const s = await created();
  await stopBoth(s);
  const [a, b] = await Promise.all([s.provider.exec({ id: NAME }, 'a'), s.provider.exec({ id: NAME }, 'b'), s.provider.stat({ id: NAME }, '/workspace')]);
  t.same([a.exitCode, b.exitCode], [0, 0]);
  t.equal(s.engine.count('startContainer', NAME), 2, 'one start besides the create');
  t.equal(s.engine.count('startContainer', EGRESS), 2);
});

t.test('a sandbox destroyed while a command waited for its recovery is not_found', async (t) => {
  const s = await created(internal);
  await s.engine.stopContainer(NAME, 0);
  let inspections = 0;
  s.engine.beforeCall(async (call) => {
    // Gone between the first look and the look inside the lane.
    if (call.method === 'inspectContainer' && call.target === NAME && ++inspections === 2) await s.engine.removeContainer(NAME);
  });
  const err = await s.provider.exec({ id: NAME }, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'not_found'), String(err));
});

t.test('a proxy another replica creates meanwhile is used, and waited for under the registration it wrote', async (t) => {
  const s = await created();
  await stopBoth(s);
  // The other replica's proxy: the body recovery gives one, mounting the registrations volume.
  const body = s.engine.containers.get(EGRESS)?.body;
  const mine = s.engine.registration(NAME);
  await s.engine.removeContainer(EGRESS);
  let raced = false;
  s.engine.beforeCall(async (call) => {
    if (!raced && call.method === 'createContainer' && call.target === EGRESS) {
      raced = true;
      // The other replica's recovery wins the create, starts it, writes its registration and
      // connects it.
      if (body === undefined || mine === undefined) throw new Error('no proxy to copy');
      s.engine.containers.set(EGRESS, { id: 'other', name: EGRESS, state: 'running', body, attached: [{ name: SHARED, id: s.engine.networkNamed(SHARED)?.id }, { name: NET, id: s.engine.networkNamed(NET)?.id }], volumes: [`${EGRESS}-policy`] });
      await s.engine.putRegistration(EGRESS, registrationArchive('sandbox', { version: 1, sandbox: NAME, lifecycle: 'the-other-replica-0001', subnet: mine.subnet, address: mine.address, policy: { allowHosts: mine.policy.allowHosts } }));
    }
  });
  const probes: string[] = [];
  const model = s.engine.onExec;
  s.engine.onExec = async (container, request) => {
    const cmd = request.cmd.join(' ');
    if (container === NAME && cmd.includes('/dev/tcp/')) probes.push(/X-Egress-Sandbox: [^\\]*lifecycle=([A-Za-z0-9-]+)/.exec(cmd)?.[1] ?? 'any answer');
    return model(container, request);
  };
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.equal(s.engine.containers.get(EGRESS)?.id, 'other', 'the other replica\'s proxy');
  t.same(probes, ['any answer', 'the-other-replica-0001'], 'its leg first (the registration is written before it), then the registration it wrote');
});

t.test('a 409 while the rebuilt proxy\'s registration is read is that rebuild\'s error, and the next recovery finishes it', async (t) => {
  const s = await created();
  await s.engine.removeContainer(EGRESS);
  s.engine.failOnce('startExec', EGRESS, 409, 'Container is restarting, wait until the container is running');
  const err = await s.provider.resume({ id: NAME }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), `told to retry, not to check the image: ${String(err)}`);
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  const net = s.engine.networkNamed(NET)?.id;
  t.ok(s.engine.containers.get(EGRESS)?.attached.some((a) => a.id === net), 'the proxy has its leg on the sandbox network');
  t.ok(s.engine.registration(NAME) !== undefined, 'and its registration');
});

t.test('a proxy that cannot be rebuilt fails the resume with the engine error', async (t) => {
  const s = await created();
  await stopBoth(s);
  await s.engine.removeContainer(EGRESS);
  s.engine.failOnce('createContainer', EGRESS, 500, 'devmapper: no space left');
  const err = await s.provider.resume({ id: NAME }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'engine_error'), String(err));
});

t.test('a network another replica recreates meanwhile is used', async (t) => {
  const s = await created();
  await stopBoth(s);
  await s.engine.removeNetwork(NET);
  let raced = false;
  s.engine.beforeCall(async (call) => {
    if (!raced && call.method === 'createNetwork' && call.target === NET) {
      raced = true;
      // The other replica's network: this controller's own kind, with the sandbox's labels.
      s.engine.putNetwork('other-net', { Name: NET, Internal: true, Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' }, Labels: { ...FAKE_LABELS, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': NAME } });
    }
  });
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.equal(s.engine.networkNamed(NET)?.id, 'other-net');
  t.ok(s.engine.reachable(NAME, EGRESS), 'both on the network the other replica made');
});

t.test('a proxy that does not answer after recovery is egress_unavailable', async (t) => {
  const s = await created();
  await stopBoth(s);
  // The probe from inside the sandbox never sees the proxy answer (the proxy's own exec, the
  // read of its registration, works).
  const model = s.engine.onExec;
  s.engine.onExec = (container, request) => (container === NAME ? { exitCode: 137 } : model(container, request));
  const err = await s.provider.resume({ id: NAME }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'egress_unavailable'), String(err));
});

t.test('a container paused between the recovery and the command is recovered again', async (t) => {
  const s = await created();
  let paused = false;
  s.engine.beforeCall(async (call) => {
    if (!paused && call.method === 'startExec' && call.target === NAME) {
      paused = true;
      await s.engine.pauseContainer(NAME);
    }
  });
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0, 'the 409 of the exec is retried once after a recovery');
  t.equal(state(s, NAME), 'running');
});

t.test('a rebuilt egress proxy whose registration volume lost its file gets the allowlist of the label, with a new lifecycle id', async (t) => {
  const s = await created();
  const before = s.engine.registration(NAME);
  await stopBoth(s);
  await s.engine.removeContainer(EGRESS);
  s.engine.volumeFiles.clear();
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  const after = s.engine.registration(NAME);
  t.same(after?.policy.allowHosts, ['example.com', '*.pypi.org']);
  t.not(after?.lifecycle, before?.lifecycle);
});

t.test('an allowlist sandbox whose allowlist label and registration are gone gets a proxy that allows nothing', async (t) => {
  const s = await created();
  await stopBoth(s);
  await s.engine.removeContainer(EGRESS);
  s.engine.volumeFiles.clear();
  delete s.engine.containers.get(NAME)?.body.Labels?.['dev.capybara.sandbox.allow-hosts'];
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.same(s.engine.registration(NAME)?.policy.allowHosts, [], 'an empty allowlist: fail closed, never open');
});

t.test('an egress proxy that runs off the sandbox network is put back, at its fixed address, before a command and on resume', async (t) => {
  for (const how of ['exec', 'resume'] as const) {
    const s = await created();
    const net = s.engine.networkNamed(NET);
    const address = s.engine.containers.get(EGRESS)?.attached.find((a) => a.id === net?.id)?.ipv4;
    t.match(address, /^10\.213\.\d+\.\d+$/, `${how}: the proxy had its fixed address`);
    // A controller killed between the proxy's start and its connect leaves the same state.
    await s.engine.disconnectNetwork(net?.id ?? '', EGRESS);
    t.notOk(s.engine.reachable(NAME, EGRESS), `${how}: running, and out of reach`);
    if (how === 'exec') t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0, 'the command runs');
    else t.equal(await s.provider.resume({ id: NAME }), 'running');
    t.ok(s.engine.reachable(NAME, EGRESS), `${how}: reachable again`);
    t.equal(s.engine.containers.get(EGRESS)?.attached.find((a) => a.id === net?.id)?.ipv4, address, `${how}: at the same address`);
    t.equal(s.engine.count('createContainer', EGRESS), 1, `${how}: the proxy was not rebuilt`);
    if (how === 'exec') t.ok(s.logs.some((l) => l.msg === 'egress proxy not on the sandbox network, recovering it'), 'said why');
    // The health probe asked from inside the sandbox: the leg works, not only exists.
    t.ok(s.engine.calls.slice(-4).some((c) => c.method === 'startExec' && c.target === NAME));
  }
});

t.test('a sandbox taken off its own network is put back before a command', async (t) => {
  const s = await created(internal);
  await s.engine.disconnectNetwork(s.engine.networkNamed(NET)?.id ?? '', NAME);
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0);
  t.ok(s.engine.containers.get(NAME)?.attached.some((a) => a.id === s.engine.networkNamed(NET)?.id), 'on its network again');
  t.ok(s.logs.some((l) => l.msg === 'sandbox not on its network, connecting it again'));
});

t.test('a healthy allowlist sandbox costs two inspects before a command, and a read of its registration once per period', async (t) => {
  const s = await created();
  const calls = async () => {
    const before = s.engine.calls.length;
    await s.provider.exec({ id: NAME }, 'true');
    return s.engine.calls.slice(before).map((c) => `${c.method} ${c.method === 'inspectNetwork' ? 'net' : c.target}`);
  };
  t.same(await calls(), [`inspectContainer ${NAME}`, `inspectContainer ${EGRESS}`, 'inspectNetwork net', `startExec ${EGRESS}`, `startExec ${NAME}`], 'the first command reads it');
  t.same(await calls(), [`inspectContainer ${NAME}`, `inspectContainer ${EGRESS}`, `startExec ${NAME}`], 'the next, within the period, does not');
});

t.test('a registration the proxy of its own lost is written again before a command and on resume', async (t) => {
  for (const how of ['exec', 'resume'] as const) {
    const s = await created();
    const before = s.engine.registration(NAME);
    s.engine.volumeFiles.clear();
    const probes: string[] = [];
    const model = s.engine.onExec;
    s.engine.onExec = (container, request) => {
      if (container === NAME && request.cmd.join(' ').includes('/dev/tcp/')) probes.push(request.cmd.join(' '));
      return model(container, request);
    };
    if (how === 'exec') t.equal((await s.withConfig({}).exec({ id: NAME }, 'true')).exitCode, 0, 'the command runs');
    else t.equal(await s.provider.resume({ id: NAME }), 'running');
    const after = s.engine.registration(NAME);
    t.same(after?.policy.allowHosts, ['example.com', '*.pypi.org'], `${how}: the label's list`);
    t.not(after?.lifecycle, before?.lifecycle, `${how}: a new lifecycle id`);
    t.ok(probes.some((p) => p.includes(`X-Egress-Sandbox: ${NAME}; lifecycle=${String(after?.lifecycle)}`)), `${how}: the probe waited for the proxy to name that registration`);
    if (how === 'exec') t.ok(s.logs.some((l) => l.msg === 'egress registration missing, recovering it'));
  }
});

t.test('two controllers that write the lost registration again at once: each probe follows the write that stayed', async (t) => {
  const s = await created();
  s.engine.volumeFiles.clear();
  const model = s.engine.onExec;
  let raced = false;
  s.engine.onExec = async (container, request) => {
    if (!raced && container === NAME && request.cmd.join(' ').includes('X-Egress-Sandbox')) {
      raced = true;
      // The other controller's write lands after this one's, before its probe.
      const mine = s.engine.registration(NAME);
      if (mine !== undefined) await s.engine.putRegistration(EGRESS, registrationArchive('sandbox', { version: 1, sandbox: NAME, lifecycle: 'the-other-controller-0001', subnet: mine.subnet, address: mine.address, policy: { allowHosts: mine.policy.allowHosts } }));
    }
    return model(container, request);
  };
  t.equal(await s.provider.resume({ id: NAME }), 'running', 'the probe for its own id failed, then passed for the one in force');
  t.equal(s.engine.registration(NAME)?.lifecycle, 'the-other-controller-0001');
  t.ok(raced);
});

t.test('a registration that cannot be read before a command (a proxy restarting) does not fail the command', async (t) => {
  const s = await created();
  const model = s.engine.onExec;
  s.engine.onExec = (container, request) => (container === EGRESS ? { exitCode: 137 } : model(container, request));
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0, 'the command runs');
  t.match(s.logs.filter((l) => l.msg === 'egress registration could not be read before a command'), [{ sandbox: NAME }]);
  t.equal(s.engine.count('startContainer', EGRESS), 1, 'no recovery: only the create started it');
});

t.test('a proxy that mounts no registrations (its policy its environment) is never read for one', async (t) => {
  const s = await created();
  const body = s.engine.containers.get(EGRESS)?.body;
  if (body?.HostConfig !== undefined) body.HostConfig.Mounts = [];
  const before = s.engine.calls.length;
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0);
  t.same(s.engine.calls.slice(before).map((c) => `${c.method} ${c.target}`), [`inspectContainer ${NAME}`, `inspectContainer ${EGRESS}`, `startExec ${NAME}`]);
});

t.test('transparent egress survives recovery: a recreated network\'s new address becomes the sandbox\'s name server and the proxy\'s listen address', async (t) => {
  const s = await created();
  const nameServer = () => (s.engine.containers.get(NAME)?.body.HostConfig?.Dns as string[] | undefined)?.[0];
  const listen = () => s.engine.containers.get(EGRESS)?.body.Env?.find((e) => e.startsWith(`${EGRESS_ENV.transparentListen}=`))?.split('=')[1];
  const subnet = () => (s.engine.networkNamed(NET)?.body.Labels as Record<string, string> | undefined)?.['dev.capybara.sandbox.subnet'];
  const before = nameServer();
  t.match(before, /^10\.213\.\d+\.\d+$/, 'created with its proxy as name server');
  t.equal(listen(), before, 'the proxy listens there in transparent mode');
  const oldSubnet = subnet();
  await stopBoth(s);
  await s.engine.removeNetwork(NET);
  // Someone else's network takes the old subnet meanwhile: the new network gets another one.
  s.engine.putNetwork('squatter', { Name: 'someone-else', IPAM: { Config: [{ Subnet: oldSubnet }] } });
  t.equal(await s.provider.resume({ id: NAME }), 'running');
  t.not(subnet(), oldSubnet, 'the network was recreated on another subnet');
  t.not(nameServer(), before, 'the old address is not copied into the rebuilt sandbox');
  t.equal(listen(), nameServer(), 'the rebuilt proxy listens on the address the rebuilt sandbox asks');
  const last = subnet()?.split('/')[0]?.split('.').map(Number) ?? [];
  t.equal(nameServer(), [last[0], last[1], last[2], (last[3] ?? 0) + 14].join('.'), 'the last usable address of the new /28');
});

t.test('a container another controller removes while a command starts: conflict, whatever words Docker chose', async (t) => {
  for (const [status, words] of [[500, 'Container cap-r1 is not running: Removal In Progress'], [404, 'No such container: cap-r1'], [500, 'OCI runtime exec failed']] as const) {
    const s = await created(internal);
    let raced = false;
    s.engine.beforeCall(async (call) => {
      if (!raced && call.method === 'startExec' && call.target === NAME) {
        raced = true;
        await s.engine.removeContainer(NAME);
        throw s.engine.status(call, status, words);
      }
    });
    const err = await s.provider.exec({ id: NAME }, 'true').catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'conflict'), `${status} ${words}: ${String(err)}`);
  }
});

t.test('a destroy by another process kills the proxy probe of a command\'s recovery: conflict, not egress_unavailable', async (t) => {
  const s = await created();
  await stopBoth(s);
  // The other process's destroy takes the registration, then the containers.
  destroyedDuringProbe(s, NAME, [NAME, EGRESS]);
  const err = await s.provider.exec({ id: NAME }, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.match((err as Error).message, /was removed/);
});

t.test('a probe of a recovery that fails with nobody else at work is still egress_unavailable', async (t) => {
  const s = await created();
  await stopBoth(s);
  s.engine.onExec = async (container, request) =>
    container === NAME && request.cmd.join(' ').includes('/dev/tcp/') ? { exitCode: 1 } : s.engine.defaultExec(container, request);
  const err = await s.provider.exec({ id: NAME }, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'egress_unavailable'), String(err));
});

t.test('an engine failure of a command on a sandbox still running stays the engine\'s error', async (t) => {
  const s = await created(internal);
  s.engine.failOnce('startExec', NAME, 500, 'OCI runtime exec failed: no space left');
  const err = await s.provider.exec({ id: NAME }, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'engine_error'), String(err));
  t.equal((await s.provider.exec({ id: NAME }, 'true')).exitCode, 0, 'the next command runs');
});

t.test('an open sandbox is not started again where the deployment does not allow open egress', async (t) => {
  const s = fakeSandbox({ allowOpenEgress: true });
  const h = await s.provider.create({ id: 'opened', image: IMAGES.sandbox, limits: { egress: 'open' } });
  await s.provider.suspend(h);
  const closed = s.withConfig({ allowOpenEgress: false });
  for (const [call, run] of [
    ['resume', () => closed.resume(h)],
    ['a command, which starts its sandbox', () => closed.exec(h, 'true')],
  ] as const) {
    const err = await run().then(() => undefined, (e: unknown) => e);
    t.ok(isSandboxError(err, 'open_egress_disabled'), `${call}: refused (${String(err).slice(0, 80)})`);
  }
  t.not(s.engine.containers.get('cap-opened')?.state, 'running', 'the container stays stopped');
  await closed.destroy(h);
  t.notOk(s.engine.containers.has('cap-opened'), 'and can still be destroyed');
});

t.test('a sandbox whose image or caps today\'s config no longer allows is not started again', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'narrowed', image: IMAGES.sandbox, limits: { egress: 'none', memoryMb: 1024, cpu: 1 } });
  await s.provider.suspend(h);
  const narrowings: Array<[string, Parameters<typeof s.withConfig>[0], RegExp]> = [
    ['an image no longer listed', { allowedImages: ['other:1'] }, /not one of the deployment's allowedImages now/],
    ['a lowered memory ceiling', { maxLimits: { memoryMb: 512 } }, /maxLimits\.memoryMb/],
    ['a lowered CPU ceiling', { maxLimits: { cpu: 0.5 } }, /maxLimits\.cpu/],
  ];
  for (const [what, config, words] of narrowings) {
    const narrowed = s.withConfig(config);
    for (const [call, run] of [
      ['resume', () => narrowed.resume(h)],
      ['a command, which starts its sandbox', () => narrowed.exec(h, 'true')],
    ] as const) {
      const err = await run().then(() => undefined, (e: unknown) => e);
      t.ok(isSandboxError(err, 'invalid_spec') && words.test(err.message), `${what}, ${call}: refused (${String(err).slice(0, 100)})`);
    }
  }
  t.not(s.engine.containers.get('cap-narrowed')?.state, 'running', 'the container stays stopped');
  await s.provider.resume(h);
  t.equal(s.engine.containers.get('cap-narrowed')?.state, 'running', 'under the config it was made with, it starts');
  await s.provider.destroy(h);
});

t.test('a running sandbox is still repaired under a narrowed config: the rules are met at a start', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'repaired', image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'], memoryMb: 1024 } });
  await s.engine.removeContainer('cap-repaired-egress');
  const narrowed = s.withConfig({ maxLimits: { memoryMb: 512 } });
  t.equal((await narrowed.exec(h, 'true')).exitCode, 0, 'its command runs once its proxy is rebuilt');
  t.equal(s.engine.containers.get('cap-repaired-egress')?.state, 'running', 'the proxy is back');
  await narrowed.suspend(h);
  const err = await narrowed.resume(h).then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), `stopped, it is not started again (${String(err).slice(0, 80)})`);
});

t.test('a rebuild whose image tag now declares a controller label is refused, and leaves no container that carries it', async (t) => {
  const s = await created(internal);
  await s.engine.stopContainer(NAME, 0);
  await s.engine.removeNetwork(NET);
  // The tag re-pointed at an image that claims another sandbox's persistent workspace.
  s.engine.imageLabels.set(IMAGES.sandbox, { 'dev.capybara.sandbox.workspace': 'victim' });
  const err = await s.provider.exec({ id: NAME }, 'true').then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), `refused (${String(err)})`);
  t.match(String(err), /dev\.capybara\.sandbox\.workspace/, 'naming the label');
  t.equal(s.engine.count('startContainer', NAME), 1, 'never started again (the one start is the create\'s)');
  const carriers = [...s.engine.containers.values()].filter((c) => c.body.Labels?.['dev.capybara.sandbox.workspace'] === 'victim');
  t.same(carriers.map((c) => c.name), [], 'no container carries the label');
});

t.test('the same image at create is refused too, naming the label', async (t) => {
  const s = fakeSandbox();
  s.engine.imageLabels.set(IMAGES.sandbox, { 'dev.capybara.sandbox.egress-isolation': 'shared' });
  const err = await s.provider.create(internal).then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), `refused (${String(err)})`);
  t.match(String(err), /egress-isolation/);
  t.equal(state(s, NAME), 'missing', 'nothing left');
});
