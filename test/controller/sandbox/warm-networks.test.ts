/**
 * Warm network slots (`warmSlots`, controller/sandbox/warm-networks.ts) on the in-memory engine:
 * a pool made ahead, each network joined by its shard under no alias with a vacant registration;
 * a create that takes one registers on it before its container starts and makes no network and no
 * leg of its own, its proxy variables naming the proxy's address; the pool refills; destroy ends
 * the registration, takes the leg away and removes the network (never handed out again); a failed
 * create discards what it took; recovery finds the sandbox on it, and makes it again when it is
 * gone. The real engine: docker-warm-networks.test.ts.
 */
import t, { type Test } from 'tap';
import { TENANTS_DIR, IMAGES } from '../../../common/index.js';
import { fakeSandbox, leftOver, type FakeSandbox } from '../../support/fake-sandbox.js';

const SHARD = 'cap-egress.0.capybara-sandbox';
const spec = (id: string, allowHosts: string[] = ['pypi.org']) => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts } });

function warmNetworks(s: FakeSandbox): string[] {
  return s.engine.networkNames().filter((n) => n.startsWith('cap-warm.')).sort();
}

function registrationAt(s: FakeSandbox, subnet: string): unknown {
  const file = s.engine.fileIn(SHARD, `${TENANTS_DIR}/${subnet.replace('/', '_')}.json`);
  return file === undefined ? undefined : JSON.parse(file.toString('utf8'));
}

async function networkOf(s: FakeSandbox, name: string): Promise<{ name: string; subnet: string }> {
  const view = await s.engine.inspectContainer(name);
  const network = await s.engine.inspectNetwork(String(view?.hostConfig.NetworkMode));
  return { name: network?.name ?? '', subnet: network?.labels['dev.capybara.sandbox.subnet'] ?? '' };
}

/** Suspends `a`, removes its warm network `warm` (the shard's leg first), resumes it: its network then. */
async function removedUnderSuspendedSandbox(t: Test, s: FakeSandbox, a: { id: string }, warm: string): Promise<{ name: string; subnet: string }> {
  await s.provider.suspend(a);
  await s.engine.disconnectNetwork(warm, SHARD);
  await s.engine.removeNetwork(warm);
  t.equal(await s.provider.resume(a), 'running');
  return networkOf(s, 'cap-a');
}

t.test('a pool of warm networks, each joined by a shard under no alias, its registration vacant', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 2 });
  t.equal(await s.provider.warmUp(), 2);
  const warm = warmNetworks(s);
  t.equal(warm.length, 2);
  t.match(warm[0], /^cap-warm\.[0-9a-f]{8}\.[0-9]+$/);
  for (const name of warm) {
    const view = await s.engine.inspectNetwork(name);
    t.match(view, { internal: true, labels: { 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.egress-shard': '0', 'dev.capybara.test': 'fake' } }, `${name}: internal, labelled`);
    t.same(registrationAt(s, view?.labels['dev.capybara.sandbox.subnet'] ?? ''), { version: 1, vacant: true }, `${name}: its registration vacant`);
    const leg = (await s.engine.inspectContainer(SHARD))?.networks.find((n) => n.name === name);
    t.ok(leg !== undefined, `${name}: the shard's leg`);
  }
  t.equal(await s.provider.warmUp(), 2, 'full: nothing more is made');
  t.equal(warmNetworks(s).length, 2);
});

t.test('a create takes a warm network: no network or leg of its own, registered before its start, the proxy at its address', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const [warm] = warmNetworks(s);
  const before = s.engine.calls.length;
  const a = await s.provider.create(spec('a', ['pypi.org']));
  const calls = s.engine.calls.slice(before).map((c) => `${c.method}:${c.target}`);
  const made = calls.filter((c) => c.startsWith('createNetwork:') || c.startsWith('connectNetwork:'));
  const network = await networkOf(s, 'cap-a');
  t.equal(network.name, warm, 'on the warm network');
  t.notOk(s.engine.networkNames().includes('cap-a-net'), 'no network of its own');
  // The refill makes and joins the next warm network meanwhile, and nothing else is.
  const creates = made.filter((c) => c.startsWith('createNetwork:'));
  t.ok(creates.every((c) => c.startsWith('createNetwork:cap-warm.')), `no network made for it (${made.join(' ')})`);
  // One connect finds the shard on the taken network already (it checks the leg is still there).
  t.equal(made.length, 2 * creates.length + 1, 'no leg but the refill\'s');
  t.ok(calls.indexOf(`putRegistration:${SHARD}`) < calls.indexOf('startContainer:cap-a'), 'its registration before its start');
  t.match(registrationAt(s, network.subnet), { sandbox: 'cap-a', policy: { allowHosts: ['pypi.org'] } });
  const view = await s.engine.inspectContainer('cap-a');
  const address = (await s.engine.inspectContainer(SHARD))?.networks.find((n) => n.name === warm)?.ipv4 ?? '';
  t.match(address, /^10\./, 'the shard\'s fixed address there');
  t.ok(view?.env.includes(`HTTPS_PROXY=http://${address}:3128`), 'its proxy variables name that address');
  t.equal(view?.labels['dev.capybara.sandbox.warm-network'], warm, 'the container records the network');
  t.ok(s.engine.reachable('cap-a', address), 'a reaches its proxy there');
  t.notOk(s.engine.reachable('cap-a', 'cap-a-egress'), 'under no alias');

  // The pool refills behind it.
  t.equal(await s.provider.warmUp(), 1, 'refilled');
  const [next] = warmNetworks(s).filter((n) => n !== warm);
  t.ok(next !== undefined, 'with another network');

  // Live changes reach its registration.
  t.same(await s.provider.changeAllowHosts(a, { allow: ['crates.io'] }), ['pypi.org', 'crates.io']);
  t.match(registrationAt(s, network.subnet), { sandbox: 'cap-a', policy: { allowHosts: ['pypi.org', 'crates.io'] } });

  // Destroy: vacant, the leg gone, the network removed; never back in the pool.
  await s.provider.destroy(a);
  t.same(registrationAt(s, network.subnet), { version: 1, vacant: true }, 'its registration ended');
  t.notOk(s.engine.networkNames().includes(warm ?? ''), 'the warm network removed');
  t.same(leftOver(s, 'cap-a'), [], 'nothing of a left');
  const order = s.engine.calls.map((c) => `${c.method}:${c.target}`).filter((c) => /putRegistration|disconnectNetwork|removeNetwork/.test(c)).slice(-3);
  t.match(order, [/^putRegistration:cap-egress/, /^disconnectNetwork:cap-egress/, /^removeNetwork:/], 'policy gone, then leg, then network');
  const b = await s.provider.create(spec('b'));
  t.equal((await networkOf(s, 'cap-b')).name, next, 'the next create takes the next one');
  await s.provider.destroy(b);
});

t.test('a create that fails discards the warm network it took', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const [warm] = warmNetworks(s);
  s.engine.failOnce('startContainer', 'cap-f', 500, 'the engine failed');
  await t.rejects(s.provider.create(spec('f')));
  t.notOk(s.engine.networkNames().includes(warm ?? ''), 'removed, never handed out again');
  t.same(leftOver(s, 'cap-f'), [], 'nothing of f left');
  await s.provider.warmUp();
  const g = await s.provider.create(spec('g'));
  t.not((await networkOf(s, 'cap-g')).name, warm, 'g gets a new one');
  await s.provider.destroy(g);
});

t.test('with the sandbox isolation, or none configured, no warm network is made', async (t) => {
  for (const config of [{ egressIsolation: 'sandbox' as const, warmSlots: 2 }, { egressIsolation: 'shared' as const }]) {
    const s = fakeSandbox(config);
    t.equal(await s.provider.warmUp(), 0);
    await s.provider.create(spec('a'));
    t.same(warmNetworks(s), [], JSON.stringify(config));
    t.ok(s.engine.networkNames().includes('cap-a-net'));
  }
});

t.test('recovery: a leg taken away comes back without an alias; a network gone is made again, the proxy variables following the address', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const a = await s.provider.create(spec('a'));
  const { name: warm } = await networkOf(s, 'cap-a');
  await s.engine.disconnectNetwork(warm, SHARD);
  t.equal((await s.provider.exec(a, 'true')).exitCode, 0, 'a command runs once the leg is back');
  const leg = (await s.engine.inspectContainer(SHARD))?.networks.find((n) => n.name === warm);
  t.ok(leg !== undefined, 'the shard is on it again');
  t.ok(s.engine.reachable('cap-a', leg?.ipv4 ?? ''), 'at the address a names');

  // The network removed under a stopped sandbox: made again under its name, the container too.
  const again = await removedUnderSuspendedSandbox(t, s, a, warm);
  t.equal(again.name, warm, 'the same name');
  const address = (await s.engine.inspectContainer(SHARD))?.networks.find((n) => n.name === warm)?.ipv4 ?? '';
  t.ok((await s.engine.inspectContainer('cap-a'))?.env.includes(`HTTP_PROXY=http://${address}:3128`), 'the proxy variables name the proxy\'s address there');
  t.ok(s.engine.reachable('cap-a', address));
  t.match(registrationAt(s, again.subnet), { sandbox: 'cap-a' });
  await s.provider.destroy(a);
  t.same(warmNetworks(s).filter((n) => n === warm), [], 'removed with it');
});

t.test('drainWarm removes the ready ones; creates then make their own until warmUp', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 2 });
  await s.provider.warmUp();
  await s.provider.drainWarm();
  t.same(warmNetworks(s), [], 'none left');
  const legs = (await s.engine.inspectContainer(SHARD))?.networks.filter((n) => n.name.startsWith('cap-warm.'));
  t.same(legs, [], 'no leg left on the shard');
  const a = await s.provider.create(spec('a'));
  t.equal((await networkOf(s, 'cap-a')).name, 'cap-a-net', 'a network of its own');
  t.same(warmNetworks(s), [], 'and no refill after it');
  t.equal(await s.provider.warmUp(), 2, 'until warmUp');
  await s.provider.destroy(a);
});

t.test('a destroy that goes round again still removes the warm network, its container gone by then', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const a = await s.provider.create(spec('a'));
  const { name: warm } = await networkOf(s, 'cap-a');
  const id = (await s.engine.inspectNetwork(warm))?.id ?? '';
  // As when another call's container is on it for a moment: the first removal is refused.
  s.engine.failOnce('removeNetwork', id, 403, `error while removing network: network ${warm} id ${id} has active endpoints`);
  await s.provider.destroy(a);
  t.notOk(s.engine.networkNames().includes(warm), 'removed in the next round');
  t.same(leftOver(s, 'cap-a'), []);
});

t.test('recovery never moves a sandbox onto a warm network it was not made on (a label from its image)', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const a = await s.provider.create(spec('a', ['pypi.org']));
  const victim = await networkOf(s, 'cap-a');
  t.match(victim.name, /^cap-warm\./, 'a is on a warm network');
  // Another replica, with no warm slots: x gets a network of its own.
  const other = s.withConfig({ warmSlots: 0 });
  const x = await other.create(spec('x', ['evil.example']));
  t.equal((await networkOf(s, 'cap-x')).name, 'cap-x-net');
  // dockerd merges an image's labels into the container's for every key the body does not set: a
  // container made again from its image tag (a recovery's rebuild), or seen by another replica's
  // recovery before the create's own label check, carries the image's warm-network label.
  const container = s.engine.containers.get('cap-x');
  container!.body.Labels = { ...container!.body.Labels, 'dev.capybara.sandbox.warm-network': victim.name };
  await other.exec(x, 'true').catch(() => undefined);
  t.not((await networkOf(s, 'cap-x')).name, victim.name, 'x is not on a\'s network');
  t.match(registrationAt(s, victim.subnet), { sandbox: 'cap-a', policy: { allowHosts: ['pypi.org'] } }, 'a keeps its own registration');
  t.ok(s.engine.networkNames().includes(victim.name), 'a\'s network stays');
  await other.destroy(x);
  t.ok(s.engine.networkNames().includes(victim.name), 'and stays after x is destroyed');
  await s.provider.destroy(a);
});

t.test('a warm network whose shard was stopped or removed meanwhile still serves its create', async (t) => {
  for (const [what, lose] of [
    ['stopped', (s: FakeSandbox) => s.engine.stopContainer(SHARD, 0)],
    ['removed', (s: FakeSandbox) => s.engine.removeContainer(SHARD)],
  ] as const) {
    const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
    await s.provider.warmUp();
    const [warm] = warmNetworks(s);
    // A shard stopped (docker stop, the engine restarted) or removed (made again from its volume
    // by the next recovery or create) while the warm network waits.
    await lose(s);
    const a = await s.provider.create(spec('a'));
    t.equal((await networkOf(s, 'cap-a')).name, warm, `${what}: on the warm network`);
    const address = (await s.engine.inspectContainer(SHARD))?.networks.find((n) => n.name === warm)?.ipv4 ?? '';
    t.ok(s.engine.reachable('cap-a', address) && address !== '', `${what}: a reaches its proxy`);
    await s.provider.destroy(a);
  }
});

t.test('a drain also removes the warm networks being made when it began', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 2 });
  await s.provider.warmUp();
  // A create refills the pool behind it, in the background: the controller stops meanwhile.
  const a = await s.provider.create(spec('a'));
  await s.provider.drainWarm();
  // The makes under way (the in-memory engine finishes them within a few ticks).
  await new Promise((resolve) => setTimeout(resolve, 200));
  await s.provider.destroy(a);
  t.same(warmNetworks(s), [], 'no warm network left, nor a leg on the shard');
  t.same((await s.engine.inspectContainer(SHARD))?.networks.filter((n) => n.name.startsWith('cap-warm.')), []);
});

t.test('a warm network whose registration could not be written goes, though its shard keeps refusing', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 2 });
  // The shard's volume refuses every write (full, or the engine failing): no make gets further.
  s.engine.beforeCall((call) => {
    if (call.method === 'putRegistration' && call.target === SHARD) throw s.engine.status(call, 500, 'no space left on device');
  });
  for (let round = 0; round < 3; round += 1) t.equal(await s.provider.warmUp(), 0, `round ${round}: none ready`);
  t.same(warmNetworks(s), [], 'no network left behind by the failed makes');
});

t.test('destroy removes a warm network a recovery made again, its container gone', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const a = await s.provider.create(spec('a'));
  const { name: warm } = await networkOf(s, 'cap-a');
  const again = await removedUnderSuspendedSandbox(t, s, a, warm);
  t.equal(again.name, warm, 'made again under its name');
  // The container gone (a later rebuild that removed it and could not make it again).
  await s.engine.removeContainer('cap-a');
  await s.provider.destroy(a);
  t.notOk(s.engine.networkNames().includes(warm), 'the network made again goes with the sandbox');
  t.same(registrationAt(s, again.subnet), { version: 1, vacant: true }, 'its registration ended');
  t.same((await s.engine.inspectContainer(SHARD))?.networks.filter((n) => n.name === warm), [], 'the shard\'s leg gone');
});

t.test('a warm network that waited too long is not handed out, and a drain waits for its removal', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  const [aged] = warmNetworks(s);
  const agedId = (await s.engine.inspectNetwork(aged ?? ''))?.id;
  // Its removal takes a while, as an engine call can.
  s.engine.beforeCall(async (call) => {
    if (call.method === 'removeNetwork' && call.target === agedId) await new Promise((r) => setTimeout(r, 300));
  });
  const now = Date.now;
  Date.now = () => now() + 21 * 60_000;
  t.teardown(() => {
    Date.now = now;
  });
  const a = await s.provider.create(spec('a'));
  t.equal((await networkOf(s, 'cap-a')).name, 'cap-a-net', 'past 20 minutes: a network of its own');
  await s.provider.drainWarm();
  t.notOk(s.engine.networkNames().includes(aged ?? ''), 'the aged one removed by the time the drain returns');
  t.same(warmNetworks(s), [], 'none left');
  await s.provider.destroy(a);
});
