/**
 * The shared egress (`egressIsolation: shared`, controller/sandbox/shards.ts) on the in-memory
 * engine: sandboxes share a shard, each registered under its subnet's slot before its container
 * starts and served at its own network's proxy address under its own proxy name; shards fill to
 * their size; a destroy ends the registration and takes the leg away before the network goes; a
 * sandbox with secrets keeps a proxy of its own; recovery brings back a missing registration, leg
 * or shard. The real proxy serving them is docker-shared-egress.test.ts.
 */
import t from 'tap';
import { TENANTS_DIR, IMAGES, registrationArchive } from '../../../common/index.js';
import { REGISTRATION_CHECKED_MS, RegistrationChecks } from '../../../controller/sandbox/registration-check.js';
import { fakeSandbox, leftOver, type FakeSandbox } from '../../support/fake-sandbox.js';

const SHARD = 'cap-egress.0.capybara-sandbox';
const spec = (id: string, allowHosts: string[] = ['pypi.org']) => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts } });

function subnetOf(s: FakeSandbox, name: string): string {
  const network = [...s.engine.networks.values()].find((n) => n.name === `${name}-net`);
  return String((network?.body.Labels as Record<string, string> | undefined)?.['dev.capybara.sandbox.subnet']);
}

/** The registration a shard holds for a sandbox's network, parsed, by the network's subnet label. */
function registrationOf(s: FakeSandbox, shard: string, name: string): { sandbox: string; lifecycle: string; subnet: string; policy: { allowHosts: string[] } } | { vacant: true } | undefined {
  const subnet = subnetOf(s, name);
  const file = s.engine.fileIn(shard, `${TENANTS_DIR}/${subnet.replace('/', '_')}.json`);
  return file === undefined ? undefined : (JSON.parse(file.toString('utf8')) as ReturnType<typeof registrationOf>);
}

t.test('two sandboxes share one shard, each registered under its own subnet and reached by its own proxy name', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const a = await s.provider.create(spec('a', ['pypi.org']));
  const b = await s.provider.create(spec('b', ['crates.io']));
  t.notOk(s.engine.containers.has('cap-a-egress'), 'no proxy container of its own');
  t.ok(s.engine.containers.has(SHARD), 'one shard');
  t.equal(s.engine.count('createContainer', SHARD), 1, 'created once, for the first sandbox');
  t.match(registrationOf(s, SHARD, 'cap-a'), { sandbox: 'cap-a', policy: { allowHosts: ['pypi.org'] } });
  t.match(registrationOf(s, SHARD, 'cap-b'), { sandbox: 'cap-b', policy: { allowHosts: ['crates.io'] } });
  t.ok(s.engine.reachable('cap-a', 'cap-a-egress'), 'a reaches its proxy by the name its variables use');
  t.notOk(s.engine.reachable('cap-a', 'cap-b-egress'), 'not b\'s');
  t.notOk(s.engine.reachable('cap-a', 'cap-b'), 'nor b');
  const shard = await s.engine.inspectContainer(SHARD);
  t.equal(shard?.networks.length, 3, 'the shared network and one leg per sandbox network');
  t.match(shard?.hostConfig, { ReadonlyRootfs: true, CapDrop: ['ALL'], Sysctls: { 'net.ipv4.ip_forward': '0' } }, 'hardened like a sandbox\'s own proxy');
  t.same((await s.engine.inspectContainer('cap-a'))?.labels['dev.capybara.sandbox.egress-shard'], '0', 'the container records its shard');

  // Live changes go to the shard's slot.
  t.same(await s.provider.changeAllowHosts(a, { allow: ['deb.debian.org'] }), ['pypi.org', 'deb.debian.org']);
  t.match(registrationOf(s, SHARD, 'cap-a'), { policy: { allowHosts: ['pypi.org', 'deb.debian.org'] } });
  t.match(registrationOf(s, SHARD, 'cap-b'), { policy: { allowHosts: ['crates.io'] } }, 'b untouched');

  // Destroy: the slot vacant, the leg gone, then the network; the shard stays for the others.
  const subnetA = subnetOf(s, 'cap-a');
  await s.provider.destroy(a);
  t.same(leftOver(s, 'cap-a'), [], 'nothing of a left');
  const slot = s.engine.fileIn(SHARD, `${TENANTS_DIR}/${subnetA.replace('/', '_')}.json`);
  t.same(JSON.parse(String(slot)), { version: 1, vacant: true }, 'its registration ended');
  const order = s.engine.calls.map((c) => `${c.method}:${c.target}`).filter((c) => /putRegistration|disconnectNetwork|removeNetwork/.test(c)).slice(-3);
  t.match(order, [/^putRegistration:cap-egress\.0\.capybara-sandbox/, /^disconnectNetwork:cap-egress\.0\.capybara-sandbox/, /^removeNetwork:/], 'policy gone, then leg, then network');
  t.equal((await s.engine.inspectContainer(SHARD))?.networks.length, 2);
  t.ok(s.engine.reachable('cap-b', 'cap-b-egress'), 'b still served');
  await s.provider.destroy(b);
});

t.test('a shard of another image takes no new sandbox: the next gets a shard of the image configured now', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const a = await s.provider.create(spec('a', ['pypi.org']));
  const next = 'capybara-sandbox-egress:next';
  s.engine.images.add(next);
  const upgraded = s.withConfig({ egressIsolation: 'shared', egressProxyImage: next });
  const b = await upgraded.create(spec('b', ['crates.io']));
  const shardOf = async (name: string): Promise<string | undefined> => (await s.engine.inspectContainer(name))?.labels['dev.capybara.sandbox.egress-shard'];
  t.same([await shardOf('cap-a'), await shardOf('cap-b')], ['0', '1'], 'b on a new shard');
  t.equal((await s.engine.inspectContainer(SHARD))?.image, IMAGES.egress, 'the old shard keeps its image');
  t.equal((await s.engine.inspectContainer('cap-egress.1.capybara-sandbox'))?.image, next, 'the new one has the image configured now');
  t.equal((await upgraded.exec(a, 'true')).exitCode, 0, 'a is still served by the old shard, through the upgraded controller');
  t.equal((await s.engine.inspectContainer('cap-a'))?.labels['dev.capybara.sandbox.egress-shard'], '0');
  await upgraded.destroy(a);
  await upgraded.destroy(b);
});

t.test('shards of another image on every place never refuse a create: the next takes one of them with room', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const a = await s.provider.create(spec('a'));
  await s.provider.destroy(a);
  // Shards of the old image on every place (upgrades leave them: nothing removes an empty one).
  const view = s.engine.containers.get(SHARD);
  t.ok(view, 'shard 0 was made');
  for (let k = 1; k < 100; k++) {
    const name = `cap-egress.${k}.capybara-sandbox`;
    const body = structuredClone(view!.body);
    body.Labels = { ...(body.Labels ?? {}), 'dev.capybara.sandbox.egress-shard': String(k) };
    await s.engine.createContainer(name, body);
  }
  const next = 'capybara-sandbox-egress:next';
  s.engine.images.add(next);
  const upgraded = s.withConfig({ egressIsolation: 'shared', egressProxyImage: next });
  const b = await upgraded.create(spec('b'));
  t.equal((await upgraded.exec(b, 'true')).exitCode, 0, 'b is served');
  t.equal((await s.engine.inspectContainer('cap-b'))?.labels['dev.capybara.sandbox.egress-shard'], '0', 'on the first shard with room');
  await upgraded.destroy(b);
});

t.test('a leg another process took off at the same moment (dockerd\'s 500, "is not connected") is as good as gone', async (t) => {
  // Both of dockerd's wordings: its daemon's, and its network library's (CI saw the second).
  for (const words of ['is not connected to network', 'is not connected to the network']) {
    const s = fakeSandbox({ egressIsolation: 'shared' });
    const a = await s.provider.create(spec('a', ['pypi.org']));
    const network = await s.engine.inspectNetwork('cap-a-net');
    let armed = true;
    s.engine.beforeCall(async (call) => {
      if (!armed || call.method !== 'disconnectNetwork' || call.target !== SHARD) return;
      armed = false;
      // The other process's disconnect lands first; dockerd then answers this one 500.
      await s.engine.disconnectNetwork(String(network?.id), SHARD);
      throw s.engine.status(call, 500, `container 81e6df3c23ee ${words} ${String(network?.id)}`);
    });
    await s.provider.destroy(a);
    t.notOk(armed, `${words}: the disconnect was answered 500`);
    t.same(leftOver(s, 'cap-a'), [], `${words}: the destroy went on, nothing of a left`);
  }
});

t.test('a full shard sends the next sandbox to a new one', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', egressShardSize: 2 });
  for (const id of ['a', 'b', 'c']) await s.provider.create(spec(id));
  t.equal((await s.engine.inspectContainer('cap-c'))?.labels['dev.capybara.sandbox.egress-shard'], '1');
  t.ok(s.engine.reachable('cap-c', 'cap-c-egress'));
  t.equal((await s.engine.inspectContainer('cap-egress.1.capybara-sandbox'))?.networks.length, 2);
});

t.test('creates running at once in one controller never put more than a shard\'s size on it', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', egressShardSize: 2 });
  await Promise.all(['a', 'b', 'c', 'd', 'e'].map((id) => s.provider.create(spec(id))));
  const shards = await Promise.all(['a', 'b', 'c', 'd', 'e'].map(async (id) => (await s.engine.inspectContainer(`cap-${id}`))?.labels['dev.capybara.sandbox.egress-shard']));
  t.same([...shards].sort(), ['0', '0', '1', '1', '2'], 'two, two and one');
  for (const k of [0, 1, 2]) {
    const legs = ((await s.engine.inspectContainer(`cap-egress.${k}.capybara-sandbox`))?.networks.length ?? 0) - 1;
    t.equal(legs, k === 2 ? 1 : 2, `shard ${k}: its legs`);
  }
  // A create that failed gives its place back.
  s.engine.failOnce('createContainer', 'cap-f', 500, 'the engine failed');
  await t.rejects(s.provider.create(spec('f')));
  await s.provider.create(spec('g'));
  t.equal((await s.engine.inspectContainer('cap-g'))?.labels['dev.capybara.sandbox.egress-shard'], '2', 'the place f held is g\'s');
});

t.test('a sandbox with secrets, and the sandbox isolation, keep a proxy of their own', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'sandbox' });
  await s.provider.create(spec('own'));
  t.ok(s.engine.containers.has('cap-own-egress'));
  t.notOk(s.engine.containers.has(SHARD));
  t.same(s.engine.registration('cap-own')?.policy.allowHosts, ['pypi.org']);
});

t.test('recovery brings back a missing registration, leg or shard, keeping live changes', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const a = await s.provider.create(spec('a', ['pypi.org']));
  await s.provider.create(spec('b', ['crates.io']));
  await s.provider.changeAllowHosts(a, { deny: ['pypi.org'], allow: ['deb.debian.org'] });

  // The leg taken away (docker network disconnect): the next command puts it back.
  const net = [...s.engine.networks.values()].find((n) => n.name === 'cap-a-net');
  await s.engine.disconnectNetwork(String(net?.id), SHARD);
  t.notOk(s.engine.reachable('cap-a', 'cap-a-egress'));
  await s.provider.exec(a, 'true');
  t.ok(s.engine.reachable('cap-a', 'cap-a-egress'), 'connected again');

  // Its registration lost: resume writes it from the label.
  const files = s.engine.volumeFiles.get(SHARD);
  for (const key of [...(files?.keys() ?? [])]) if (key === `${subnetOf(s, 'cap-a').replace('/', '_')}.json`) files?.delete(key);
  t.equal(registrationOf(s, SHARD, 'cap-a'), undefined);
  t.equal(await s.provider.resume(a), 'running');
  t.match(registrationOf(s, SHARD, 'cap-a'), { sandbox: 'cap-a', policy: { allowHosts: ['pypi.org'] } }, 'the label\'s list: nothing else is known');
  await s.provider.changeAllowHosts(a, { allow: ['deb.debian.org'] });

  // The shard removed: made again from its volume, which keeps every registration.
  await s.engine.removeContainer(SHARD);
  await s.provider.exec(a, 'true');
  t.ok(s.engine.reachable('cap-a', 'cap-a-egress'), 'a served again');
  t.match(registrationOf(s, SHARD, 'cap-a'), { policy: { allowHosts: ['pypi.org', 'deb.debian.org'] } }, 'the live change kept');
  t.match(registrationOf(s, SHARD, 'cap-b'), { policy: { allowHosts: ['crates.io'] } });
  t.notOk(s.engine.reachable('cap-b', 'cap-b-egress'), 'b waits for its own next command');
  await s.provider.exec({ id: 'cap-b' }, 'true');
  t.ok(s.engine.reachable('cap-b', 'cap-b-egress'));
});

t.test('a shard stopped while a network of its was removed (docker network rm, prune) is made again, not left unable to start', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const a = await s.provider.create(spec('a', ['pypi.org']));
  const b = await s.provider.create(spec('b', ['crates.io']));
  await s.provider.changeAllowHosts(b, { allow: ['deb.debian.org'] });
  await s.provider.suspend(a);
  await s.engine.stopContainer(SHARD, 0);
  // A stopped container holds no endpoint: the network goes under its settings.
  const net = [...s.engine.networks.values()].find((n) => n.name === 'cap-a-net');
  await s.engine.removeNetwork(String(net?.id));
  await rejects(s.engine.startContainer(SHARD), /network .* not found/, 'the shard as it is cannot start');
  await s.provider.exec(b, 'true');
  t.ok(s.engine.reachable('cap-b', 'cap-b-egress'), 'b\'s command brought a shard back');
  t.match(registrationOf(s, SHARD, 'cap-b'), { policy: { allowHosts: ['crates.io', 'deb.debian.org'] } }, 'from its volume: the live change kept');
  t.equal(await s.provider.resume(a), 'running');
  t.ok(s.engine.reachable('cap-a', 'cap-a-egress'), 'a on a network made again, served');
  const c = await s.provider.create(spec('c'));
  t.ok(s.engine.reachable('cap-c', 'cap-c-egress'), 'and creates go on');
  // The same met first by a create, which claims the shard.
  await s.provider.suspend(c);
  await s.engine.stopContainer(SHARD, 0);
  await s.engine.removeNetwork(String([...s.engine.networks.values()].find((n) => n.name === 'cap-c-net')?.id));
  await s.provider.create(spec('d'));
  t.ok(s.engine.reachable('cap-d', 'cap-d-egress'), 'a create made the shard again');
  await s.provider.exec(b, 'true');
  t.ok(s.engine.reachable('cap-b', 'cap-b-egress'), 'and b is served again at its next command');
  // Met by the recoveries of two sandboxes at once: one makes it again, and both go on.
  await s.provider.suspend(c);
  await s.engine.stopContainer(SHARD, 0);
  await s.engine.removeNetwork(String([...s.engine.networks.values()].find((n) => n.name === 'cap-c-net')?.id));
  // The first start of the shard held until the other recovery has reached it too (if it starts
  // the shard itself) or a moment has passed (if it shares the first one's).
  let waiting = 2;
  let release: () => void = () => undefined;
  const bothThere = new Promise<void>((resolve) => { release = resolve; });
  s.engine.beforeCall(async (call) => {
    if (call.method !== 'startContainer' || call.target !== SHARD || waiting === 0) return;
    waiting -= 1;
    if (waiting === 0) release();
    await Promise.race([bothThere, new Promise((resolve) => setTimeout(resolve, 50))]);
  });
  await Promise.all([s.provider.exec(b, 'true'), s.provider.exec({ id: 'cap-d' }, 'true')]);
  t.ok(s.engine.reachable('cap-b', 'cap-b-egress') && s.engine.reachable('cap-d', 'cap-d-egress'), 'both served');
});

async function rejects(p: Promise<unknown>, message: RegExp, what: string): Promise<void> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  if (!(err instanceof Error) || !message.test(err.message)) throw new Error(`${what}: ${String(err)}`);
}

t.test('the check before a command finds a lost registration and writes it again', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const a = await s.provider.create(spec('a', ['pypi.org']));
  const reads = () => s.engine.count('startExec', SHARD);
  const before = reads();
  await s.provider.exec(a, 'true');
  await s.provider.exec(a, 'true');
  t.equal(reads() - before, 1, 'read once for two commands in a row');

  // Made vacant (as a destroy would) or removed: a controller process that has not read it
  // lately (here another one) writes the label's list back before the command runs.
  const slot = `${subnetOf(s, 'cap-a').replace('/', '_')}.json`;
  for (const lose of [
    () => s.engine.putRegistration(SHARD, registrationArchive(slot.slice(0, -5), { version: 1, vacant: true })),
    () => s.engine.volumeFiles.get(SHARD)?.delete(slot),
  ]) {
    await lose();
    t.notMatch(registrationOf(s, SHARD, 'cap-a'), { sandbox: 'cap-a' });
    await s.withConfig({}).exec(a, 'true');
    t.match(registrationOf(s, SHARD, 'cap-a'), { sandbox: 'cap-a', policy: { allowHosts: ['pypi.org'] } }, 'written again before the command');
    t.match(s.logs.filter((l) => l.msg === 'egress registration missing, recovering it'), [{ sandbox: 'cap-a' }]);
    s.logs.length = 0;
  }
});

/** Sandbox a on a shard, and registration checks of their own on a clock the test moves. */
async function checksOnA() {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  await s.provider.create(spec('a'));
  const clock = { now: 0 };
  const unreadable: string[] = [];
  return {
    s,
    clock,
    unreadable,
    network: String([...s.engine.networks.values()].find((n) => n.name === 'cap-a-net')?.id),
    shard: { name: SHARD, id: String((await s.engine.inspectContainer(SHARD))?.id), host: 'shard' as const },
    checks: new RegistrationChecks((name) => unreadable.push(name), () => clock.now),
    reads: () => s.engine.count('startExec', SHARD),
  };
}

t.test('a registration found whole is read again after the period, or on a shard made again', async (t) => {
  const { s, clock, network, shard, checks, reads } = await checksOnA();
  const before = reads();
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), true);
  clock.now = REGISTRATION_CHECKED_MS - 1;
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), true);
  t.equal(reads() - before, 1, 'within the period: no read');
  clock.now = REGISTRATION_CHECKED_MS;
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), true);
  t.equal(reads() - before, 2, 'after it: read again');
  t.equal(await checks.held(s.engine, 'cap-a', { ...shard, id: 'another' }, network), true);
  t.equal(reads() - before, 3, 'a shard made again: read at once');
  t.equal(await checks.held(s.engine, 'cap-b', shard, network), false, 'another sandbox\'s name on that network: not held');
  t.equal(await checks.held(s.engine, 'cap-a', shard, 'a-network-that-is-gone'), false, 'a network that is gone: not held');
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), true);
  const atNetwork = reads();
  await s.provider.create(spec('b'));
  const other = String([...s.engine.networks.values()].find((n) => n.name === 'cap-b-net')?.id);
  t.equal(await checks.held(s.engine, 'cap-a', shard, other), false, 'another network (b\'s): read at once, and not a\'s');
  t.equal(reads() - atNetwork, 1);
  const vacant = registrationArchive(subnetOf(s, 'cap-a').replace('/', '_'), { version: 1, vacant: true });
  await s.engine.putRegistration(SHARD, vacant);
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), false, 'vacant: not held, and not remembered');
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), false);
});

t.test('commands asking at once share one read; a read that fails counts as held for the period, told once', async (t) => {
  const { s, clock, network, shard, checks, reads, unreadable } = await checksOnA();
  const before = reads();
  t.same(await Promise.all([1, 2, 3].map(() => checks.held(s.engine, 'cap-a', shard, network))), [true, true, true]);
  t.equal(reads() - before, 1, 'one read for three commands at once');

  clock.now = REGISTRATION_CHECKED_MS;
  const model = s.engine.onExec;
  s.engine.onExec = (container, request) => (container === SHARD ? { exitCode: 137 } : model(container, request));
  t.same(await Promise.all([1, 2].map(() => checks.held(s.engine, 'cap-a', shard, network))), [true, true], 'a proxy that cannot be read: the commands go on');
  t.equal(await checks.held(s.engine, 'cap-a', shard, network), true);
  t.equal(reads() - before, 2, 'and it is not read again within the period');
  t.same(unreadable, ['cap-a'], 'told once');
});

t.test('a create whose shard registration lands after another process destroyed its network and gave the subnet to another sandbox never leaves its list in force for the sandbox that got the subnet', async (t) => {
  // One subnet in the pool: the next sandbox gets the one the destroyed sandbox had.
  const s = fakeSandbox({ egressIsolation: 'shared', addressPool: '10.213.0.0/28', subnetPrefix: 28 });
  const other = s.withConfig({});
  // The create of a in this process reaches its registration write, which waits while another
  // controller process destroys a and creates b.
  const put = s.engine.putRegistration.bind(s.engine);
  let reached!: () => void;
  const atWrite = new Promise<void>((r) => (reached = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let held = false;
  s.engine.putRegistration = async (container, archive) => {
    if (!held && archive.includes('"sandbox":"cap-a"')) {
      held = true;
      reached();
      await released;
    }
    return put(container, archive);
  };
  const creating = s.provider.create(spec('a', ['pypi.org'])).then(
    () => 'created',
    (err: unknown) => (err as { code?: string }).code,
  );
  await atWrite;
  const subnet = subnetOf(s, 'cap-a');
  await other.destroy({ id: 'cap-a' });
  await other.create(spec('b', ['crates.io']));
  t.equal(subnetOf(s, 'cap-b'), subnet, 'b has the subnet a had');
  t.match(registrationOf(s, SHARD, 'cap-b'), { sandbox: 'cap-b', policy: { allowHosts: ['crates.io'] } }, 'b registered');
  release();
  t.equal(await creating, 'conflict', 'the create of a fails, saying why');
  // Before, a's registration stayed in the slot: the shard served b's network a's list, until
  // the check before one of b's commands read it.
  t.notMatch(registrationOf(s, SHARD, 'cap-b'), { sandbox: 'cap-a' }, 'b is never served under a\'s registration');
  await s.withConfig({}).exec({ id: 'cap-b' }, 'true');
  t.match(registrationOf(s, SHARD, 'cap-b'), { sandbox: 'cap-b', policy: { allowHosts: ['crates.io'] } }, 'b\'s own again before its next command');
});

t.test('a destroy that read a network another process then removed, its subnet given to another sandbox, leaves that sandbox registered', async (t) => {
  // One subnet in the pool: the next sandbox gets the one the destroyed sandbox had.
  const s = fakeSandbox({ egressIsolation: 'shared', addressPool: '10.213.0.0/28', subnetPrefix: 28 });
  const other = s.withConfig({});
  await s.provider.create(spec('a', ['pypi.org']));
  // This process's destroy of a, once it has listed a's networks, waits at its next call while
  // another controller process destroys a and creates b.
  let listed = false;
  let reached!: () => void;
  const atHold = new Promise<void>((r) => (reached = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let held = false;
  s.engine.beforeCall(async (call) => {
    if (call.method === 'listNetworks') listed = true;
    else if (listed && !held && (call.method === 'inspectNetwork' || call.method === 'putRegistration')) {
      held = true;
      reached();
      await released;
    }
  });
  const destroying = s.provider.destroy({ id: 'cap-a' }).catch(() => undefined);
  await atHold;
  const subnet = subnetOf(s, 'cap-a');
  await other.destroy({ id: 'cap-a' });
  await other.create(spec('b', ['crates.io']));
  t.equal(subnetOf(s, 'cap-b'), subnet, 'b has the subnet a had');
  release();
  await destroying;
  // Before, the late write made b's slot vacant: the shard refused b everything until the check
  // before one of its commands wrote it again.
  t.match(registrationOf(s, SHARD, 'cap-b'), { sandbox: 'cap-b', policy: { allowHosts: ['crates.io'] } }, 'b keeps its registration');
  t.same(leftOver(s, 'cap-a'), [], 'nothing of a left');
});
