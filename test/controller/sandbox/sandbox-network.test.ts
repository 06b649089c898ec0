/**
 * Sandbox networks (controller/sandbox/sandbox-network.ts) on the in-memory engine: a subnet from
 * the address pool, tried in the name's order until the engine takes one; the egress proxy at the
 * subnet's last usable address; networks by id, duplicates of one name (Docker 20.10's
 * CheckDuplicate race) resolved by create and removed by destroy; and several controllers (each
 * with lanes of its own, as separate processes have) creating, destroying and running commands
 * in one id at once: every call succeeds or says `conflict` (or `not_found`), and what is left is
 * one working sandbox or nothing, never an id that can no longer be created. The real-engine
 * counterparts are in docker-scale.test.ts.
 */
import t, { type Test } from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { parseAddressPool, sandboxSubnet, subnetSlots } from '../../../controller/spec/address-pool.js';
import { IMAGES } from '../../../common/index.js';
import { destroyedDuringProbe, fakeSandbox, FAKE_LABELS, leftOver } from '../../support/fake-sandbox.js';
import { prng } from '../../support/prng.js';

const ID = 'n1';
const NAME = `cap-${ID}`;
const EGRESS = `${NAME}-egress`;
const NET = `${NAME}-net`;
const allowlist = { id: ID, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts: ['example.com'] } };
const internal = { id: ID, image: IMAGES.sandbox, limits: { egress: 'internal' as const } };
const OWN_LABELS = { ...FAKE_LABELS, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': NAME };

/** The subnets NET tries, in order, in the default pool. */
const pool = parseAddressPool('10.213.0.0/16', 28);
const candidates = (name: string, count: number): string[] => {
  const out: string[] = [];
  for (const slot of subnetSlots(pool, name)) {
    if (out.length === count) break;
    out.push(sandboxSubnet(pool, slot).subnet);
  }
  return out;
};

t.test('a sandbox network takes the first free subnet of its candidates; the proxy its last usable address', async (t) => {
  const s = fakeSandbox();
  const [first, second] = candidates(NET, 2);
  // Someone else's network holds the first candidate.
  await s.engine.createNetwork({ Name: 'cap-other-net', IPAM: { Config: [{ Subnet: first }] } } as { Name: string });
  await s.provider.create(allowlist);
  const net = s.engine.networkNamed(NET);
  t.same((net?.body as { IPAM?: unknown }).IPAM, { Config: [{ Subnet: second, IPRange: second?.replace('/28', '/29'), Gateway: second?.replace(/\.(\d+)\/28$/, (_, last: string) => `.${Number(last) + 1}`) }] }, 'the second candidate');
  t.equal(net?.body.Labels && (net.body.Labels as Record<string, string>)['dev.capybara.sandbox.subnet'], second, 'labelled with it');
  t.equal(s.engine.count('createNetwork', NET), 2, 'one refused for overlapping, then the one taken');
  const leg = s.engine.containers.get(EGRESS)?.attached.find((a) => a.id === net?.id);
  t.equal(leg?.ipv4, sandboxSubnet(pool, [...subnetSlots(pool, NET)][1] ?? 0).egressAddress, 'the proxy at the last usable address');
  t.equal(s.engine.containers.get(NAME)?.body.HostConfig?.NetworkMode, net?.id, 'the sandbox joins its network by id');
  t.ok(s.engine.reachable(NAME, EGRESS));
});

t.test('every overlap message Docker gives moves on to the next subnet', async (t) => {
  for (const message of [
    'Pool overlaps with other one on this address space',
    'cannot create network 5f0c (br-5f0c): conflicts with network 9a1b (br-9a1b): networks have overlapping IPv4',
  ]) {
    const s = fakeSandbox();
    const [, second] = candidates(NET, 2);
    let refused = 0;
    s.engine.beforeCall((call) => {
      // The first candidate: refused as Docker does when another create took it meanwhile.
      if (call.method === 'createNetwork' && call.target === NET && refused === 0) {
        refused += 1;
        throw s.engine.status(call, 403, message);
      }
    });
    await s.provider.create(allowlist);
    t.equal(s.engine.count('createNetwork', NET), 2, message);
    const labels = s.engine.networkNamed(NET)?.body.Labels as Record<string, string> | undefined;
    t.equal(labels?.['dev.capybara.sandbox.subnet'], second, 'the next candidate taken');
  }
});

t.test('a full pool is address_pool_exhausted, nothing left, naming the pool and the setting', async (t) => {
  const s = fakeSandbox({ addressPool: '10.99.0.0/24', subnetPrefix: 28 });
  // Sixteen /28s in a /24: fill them all.
  for (let k = 0; k < 16; k += 1) await s.engine.createNetwork({ Name: `cap-fill${k}-net`, IPAM: { Config: [{ Subnet: `10.99.0.${k * 16}/28` }] } } as { Name: string });
  const err = await s.provider.create(internal).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'address_pool_exhausted'), String(err));
  t.match((err as Error).message, /10\.99\.0\.0\/24.*16 tried.*addressPool/);
  t.same(leftOver(s, NAME), []);
  t.equal(s.engine.count('createNetwork', NET), 16, 'every subnet of the pool tried once');
});

t.test('the engine\'s default-address-pools exhausted when the shared network is made: address_pool_exhausted, not conflict', async (t) => {
  const s = fakeSandbox();
  s.engine.beforeCall(async (call) => {
    // dockerd's answer (a 404) when its default pools hold no free subnet.
    if (call.method === 'createNetwork' && call.target === 'capybara-sandbox') {
      throw s.engine.status(call, 404, 'could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network');
    }
  });
  const err = await s.provider.create(allowlist).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'address_pool_exhausted'), String(err));
  t.match((err as Error).message, /default-address-pools for the shared network capybara-sandbox/);
  t.same(leftOver(s, NAME), [], 'nothing left half-made');
});

t.test('two networks of the name from a create race: the create keeps the oldest, removes its twin', async (t) => {
  const s = fakeSandbox();
  let raced = false;
  s.engine.beforeCall(async (call) => {
    // Another controller's create of the same name passed CheckDuplicate at the same moment as
    // this one's, and its network is there by the time this create looks for twins.
    if (!raced && call.method === 'listNetworks' && call.target === `dev.capybara.sandbox.name=${NAME}` && s.engine.networksNamed(NET).length === 1) {
      raced = true;
      s.engine.putNetwork('twin', { Name: NET, CheckDuplicate: true, Internal: true, Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' }, Labels: OWN_LABELS, IPAM: { Config: [{ Subnet: '10.213.255.240/28' }] } });
      const twin = s.engine.networks.get('twin');
      if (twin !== undefined) s.engine.networks.set('twin', { ...twin, createdMs: 0 });
    }
  });
  await s.provider.create(allowlist);
  t.same(s.engine.networksNamed(NET).map((n) => n.id), ['twin'], 'one left: the oldest');
  t.equal(s.engine.containers.get(NAME)?.body.HostConfig?.NetworkMode, 'twin', 'the sandbox joins it');
  t.ok(s.engine.reachable(NAME, EGRESS), 'and so does its proxy');
  t.match(s.logs.find((l) => /duplicate network/.test(l.msg)), { network: NET, kept: 'twin' });
});

t.test('destroy removes every network of the name that carries the sandbox\'s labels, and no other', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(internal);
  s.engine.putNetwork('twin', { Name: NET, Labels: OWN_LABELS });
  s.engine.putNetwork('foreign', { Name: NET, Labels: { 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': 'cap-other' } });
  s.engine.putNetwork('unlabelled', { Name: NET });
  await s.provider.destroy({ id: NAME });
  t.same(s.engine.networksNamed(NET).map((n) => n.id).sort(), ['foreign', 'unlabelled'], 'only the sandbox\'s own are gone');
});

t.test('a network of the name the controller did not make: create says conflict and names it', async (t) => {
  const s = fakeSandbox();
  s.engine.putNetwork('foreign', { Name: NET });
  const err = await s.provider.create(internal).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.match((err as Error).message, `docker network rm ${NET}`);
  t.same(leftOver(s, NAME), [NET], 'the foreign network stays, nothing else');
});

t.test('the shared network twice (a create race): the oldest labelled one is kept', async (t) => {
  const s = fakeSandbox();
  const shared = { Name: 'capybara-sandbox', Options: { 'com.docker.network.bridge.enable_icc': 'false' }, Labels: { 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.shared-network': 'capybara-sandbox' } };
  s.engine.putNetwork('shared-a', shared);
  s.engine.putNetwork('shared-b', shared);
  const a = s.engine.networks.get('shared-a');
  if (a !== undefined) s.engine.networks.set('shared-a', { ...a, createdMs: 0 });
  await s.provider.create(allowlist);
  t.same(s.engine.networksNamed('capybara-sandbox').map((n) => n.id), ['shared-a']);
  t.equal(s.engine.containers.get(EGRESS)?.body.HostConfig?.NetworkMode, 'shared-a', 'the proxy joins it by id');
});

t.test('a proxy replaced by another call while the create waits for it: conflict, not egress_unavailable', async (t) => {
  const s = fakeSandbox();
  s.engine.onExec = async (container, request) => {
    if (container === NAME && request.cmd.join(' ').includes('/dev/tcp/')) {
      // Another controller's create of the id removed this one's proxy and made its own.
      const mine = s.engine.containers.get(EGRESS);
      s.engine.containers.delete(EGRESS);
      if (mine !== undefined) s.engine.containers.set(EGRESS, { ...mine, id: 'theirs', attached: [] });
      return { exitCode: 137 };
    }
    return s.engine.defaultExec(container, request);
  };
  const err = await s.provider.create(allowlist).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.match((err as Error).message, `container ${EGRESS} was replaced`);
  t.same(leftOver(s, NAME), [], 'the create cleaned up after itself');
});

t.test('a destroy by another call kills the proxy probe, and the engine shows the removal only a moment later: conflict', async (t) => {
  const s = fakeSandbox();
  destroyedDuringProbe(s, NAME, [NAME, EGRESS]);
  const err = await s.provider.create(allowlist).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.match((err as Error).message, /was removed/);
  t.same(leftOver(s, NAME), [], 'nothing is left');
});

t.test('a proxy that does not answer, with nobody else at work, is still egress_unavailable', async (t) => {
  const s = fakeSandbox();
  s.engine.onExec = () => ({ exitCode: 137 });
  const err = await s.provider.create(allowlist).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'egress_unavailable'), String(err));
});

/** What each call said, and whether the id is still usable afterwards. */
async function race(t: Test, processes: number, seed: number): Promise<void> {
  const s = fakeSandbox();
  const random = prng(seed);
  // Each provider has lanes of its own: a controller process.
  const providers = Array.from({ length: processes }, () => s.withConfig({}));
  const ops = providers.flatMap((p) => Array.from({ length: 3 }, () => {
    const pick = random() * 3;
    if (pick < 1.4) return { op: 'create', run: () => p.create(allowlist).then(() => 'ok') };
    if (pick < 2.2) return { op: 'destroy', run: () => p.destroy({ id: NAME }).then(() => 'ok') };
    return { op: 'exec', run: () => p.exec({ id: NAME }, 'true').then((r) => `exit ${r.exitCode}`) };
  }));
  const results = await Promise.all(ops.map(async (o) => {
    try {
      return `${o.op}: ${await o.run()}`;
    } catch (err) {
      return `${o.op}: ${isSandboxError(err) ? err.code : `raw ${String(err)}`}`;
    }
  }));
  const allowed = /^(create: (ok|conflict)|destroy: (ok|conflict)|exec: (exit 0|conflict|not_found))$/;
  t.same(results.filter((r) => !allowed.test(r)), [], `seed ${seed}: every call succeeded or said conflict (${results.join(', ')})`);
  // What is left: one working sandbox, or nothing (leftovers of a failed create are removed by the next one).
  const container = s.engine.containers.get(NAME);
  if (container !== undefined) {
    const r = await providers[0]?.exec({ id: NAME }, 'true');
    t.equal(r?.exitCode, 0, `seed ${seed}: the sandbox left works`);
    t.ok(s.engine.reachable(NAME, EGRESS), `seed ${seed}: with its proxy on its network`);
  }
  t.ok(s.engine.networksNamed(NET).length <= 1 || container === undefined, `seed ${seed}: never two networks under a working sandbox`);
  // Never wedged: create, a command, destroy work, and leave nothing.
  await providers[1]?.create(allowlist);
  t.equal((await providers[1]?.exec({ id: NAME }, 'true'))?.exitCode, 0, `seed ${seed}: a new create works`);
  await providers[0]?.destroy({ id: NAME });
  t.same(leftOver(s, NAME), [], `seed ${seed}: and a destroy leaves nothing`);
}

t.test('two and four controllers on one id at once: success or conflict, never a wedged id', async (t) => {
  for (let seed = 1; seed <= 40; seed += 1) await race(t, seed % 2 === 0 ? 2 : 4, seed);
});
