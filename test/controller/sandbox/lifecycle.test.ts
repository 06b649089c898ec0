/**
 * Create, suspend and destroy (controller/sandbox/lifecycle.ts, build-steps.ts) on the in-memory
 * engine: what each tier makes, a start or a pull failing part-way (nothing left behind, the first
 * cause named), a destroy queued behind a create or a resume, and the refusals. The real-engine
 * counterparts are docker-sandbox.test.ts and docker-create-failures.test.ts.
 */
import t from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox, leftOver } from '../../support/fake-sandbox.js';

const ID = 'l1';
const NAME = `cap-${ID}`;
const EGRESS = `${NAME}-egress`;
const NET = `${NAME}-net`;
const SHARED = 'capybara-sandbox';
const spec = (egress: 'none' | 'internal' | 'allowlist' | 'open', more: object = {}) => ({
  id: ID,
  image: IMAGES.sandbox,
  limits: { egress, ...(egress === 'allowlist' ? { allowHosts: ['example.com'] } : {}) },
  ...more,
});

t.test('each tier makes what its row of the tier table says', async (t) => {
  const rows = [
    { egress: 'none', objects: [NAME, `${NAME}-skills`, `${NAME}-workspace`], shared: false },
    { egress: 'internal', objects: [NAME, NET, `${NAME}-skills`, `${NAME}-workspace`], shared: false },
    { egress: 'allowlist', objects: [NAME, EGRESS, NET, `${NAME}-egress-policy`, `${NAME}-skills`, `${NAME}-workspace`], shared: true },
    { egress: 'open', objects: [NAME, `${NAME}-skills`, `${NAME}-workspace`], shared: true },
  ] as const;
  for (const row of rows) {
    const s = fakeSandbox({ allowOpenEgress: true });
    t.same(await s.provider.create(spec(row.egress)), { id: NAME }, row.egress);
    t.same(leftOver(s, NAME), [...row.objects].sort(), `${row.egress}: its objects`);
    t.equal(s.engine.networkNamed(SHARED) !== undefined, row.shared, `${row.egress}: the shared network`);
    t.equal(s.engine.containers.get(NAME)?.state, 'running', `${row.egress}: started`);
    t.equal(s.engine.count('startExec', NAME), row.egress === 'allowlist' ? 1 : 0, `${row.egress}: waits for a proxy only when it has one`);
    if (row.egress === 'allowlist') t.ok(s.engine.reachable(NAME, EGRESS), 'the sandbox reaches its proxy');
    if (row.egress === 'open') t.ok(s.engine.containers.get(NAME)?.attached.some((a) => a.name === SHARED), 'open: on the shared bridge');
  }
});

t.test('a start failing mid-create leaves nothing and is the error', async (t) => {
  for (const target of [NAME, EGRESS]) {
    const s = fakeSandbox();
    s.engine.failOnce('startContainer', target, 500, 'OCI runtime create failed: runc: cgroup');
    const err = await s.provider.create(spec('allowlist')).catch((e: unknown) => e);
    t.ok(isSandboxError(err, 'engine_error'), `${target}: ${String(err)}`);
    t.match((err as Error).message, target, 'names what failed first');
    t.same(leftOver(s, NAME), [], `${target}: nothing left`);
  }
});

t.test('a step failing while another is still on the wire: the cleanup waits for it', async (t) => {
  const s = fakeSandbox();
  // The sandbox's create is slow (an image being unpacked) while its proxy's start fails.
  s.engine.beforeCall(async (call) => {
    if (call.method === 'createContainer' && call.target === NAME) for (let i = 0; i < 50; i += 1) await new Promise(setImmediate);
  });
  s.engine.failOnce('startContainer', EGRESS, 500, 'OCI runtime create failed');
  const err = await s.provider.create(spec('allowlist')).catch((e: unknown) => e);
  t.match((err as Error).message, EGRESS, 'the first failure is the error');
  // Whatever was still on the wire has landed by now.
  for (let i = 0; i < 100; i += 1) await new Promise(setImmediate);
  t.same(leftOver(s, NAME), [], 'the container created after the failure was removed too');
  t.equal(s.engine.count('startContainer', NAME), 0, 'and never started');
});

t.test('a missing image is pulled once; one that cannot be pulled is image_unavailable, nothing left', async (t) => {
  const s = fakeSandbox();
  s.engine.images.delete(IMAGES.sandbox);
  s.engine.registry.add(IMAGES.sandbox);
  await s.provider.create(spec('none'));
  t.equal(s.engine.count('pullImage'), 1);
  t.equal(s.engine.containers.get(NAME)?.state, 'running');

  const missing = fakeSandbox();
  missing.engine.images.delete(IMAGES.egress);
  const err = await missing.provider.create(spec('allowlist')).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'image_unavailable'), String(err));
  t.match((err as Error).message, IMAGES.egress);
  t.same(leftOver(missing, NAME), []);
});

t.test('a 404 that is not a missing image is not pulled for', async (t) => {
  const s = fakeSandbox();
  s.engine.failOnce('createContainer', NAME, 404, 'network cap-l1-net not found');
  const err = await s.provider.create(spec('internal')).catch((e: unknown) => e);
  // The network this create made is gone: another call removed it meanwhile.
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.match((err as Error).message, 'network cap-l1-net not found', 'the engine\'s words');
  t.equal(s.engine.count('pullImage'), 0);
  t.same(leftOver(s, NAME), []);
});

t.test('a proxy that never answers fails the create with egress_unavailable, nothing left', async (t) => {
  const s = fakeSandbox();
  s.engine.onExec = () => ({ exitCode: 137 });
  const err = await s.provider.create(spec('allowlist')).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'egress_unavailable'), String(err));
  t.same(leftOver(s, NAME), []);
});

t.test('a shard that never answers as the sandbox: the error names only commands the CLI has', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  s.engine.onExec = () => ({ exitCode: 137 });
  const err = await s.provider.create(spec('allowlist')).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'egress_unavailable'), String(err));
  const named = [...String((err as Error).message).matchAll(/capybara-sandbox ([a-z]+)/g)].map((m) => m[1]);
  t.ok(named.length > 0, 'it says what to run');
  for (const command of named) t.ok(['exec', 'run', 'destroy', 'inspect', 'logs', 'doctor'].includes(command ?? ''), `capybara-sandbox ${command} is a command of the CLI`);
});

t.test('a cleanup that fails too is logged, and the create reports the first cause', async (t) => {
  const s = fakeSandbox();
  s.engine.failOnce('startContainer', NAME, 500, 'first cause');
  let creates = 0;
  s.engine.beforeCall((call) => {
    // The removal of the network the create made (by id) fails.
    if (call.method === 'removeNetwork' && s.engine.networks.get(call.target)?.name === NET && ++creates === 1) throw s.engine.status(call, 500, 'engine busy');
  });
  const err = await s.provider.create(spec('internal')).catch((e: unknown) => e);
  t.match((err as Error).message, 'first cause');
  t.ok(s.logs.some((l) => l.msg === 'cleanup after failed create did not finish' && l.sandbox === NAME));
});

t.test('create replaces a stale instance of the same name', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(spec('allowlist'));
  const old = s.engine.containers.get(NAME)?.id;
  await s.provider.create(spec('internal'));
  t.not(s.engine.containers.get(NAME)?.id, old);
  t.same(leftOver(s, NAME), [NAME, NET, `${NAME}-skills`, `${NAME}-workspace`], 'the old proxy is gone');
});

t.test('a destroy called during a create or a resume waits for it and leaves nothing', async (t) => {
  const s = fakeSandbox();
  const [handle] = await Promise.all([s.provider.create(spec('allowlist')), s.provider.destroy({ id: NAME })]);
  t.same(handle, { id: NAME }, 'the create, called first, ran to its end');
  t.same(leftOver(s, NAME), [], 'the destroy removed what it made');

  await s.provider.create(spec('allowlist'));
  await s.provider.suspend({ id: NAME });
  await s.engine.removeContainer(EGRESS);
  await s.engine.removeNetwork(NET);
  const [resumed] = await Promise.all([s.provider.resume({ id: NAME }), s.provider.destroy({ id: NAME })]);
  t.equal(resumed, 'running');
  t.same(leftOver(s, NAME), []);
  await s.provider.destroy({ id: NAME });
  await s.provider.destroyByName(NAME);
  t.same(leftOver(s, NAME), [], 'destroy of nothing is fine');
});

t.test('suspend stops both containers, unpausing first; a missing sandbox is not_found', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(spec('allowlist'));
  await s.engine.pauseContainer(NAME);
  await s.provider.suspend({ id: NAME });
  t.same([s.engine.containers.get(NAME)?.state, s.engine.containers.get(EGRESS)?.state], ['exited', 'exited']);
  t.equal(s.engine.count('unpauseContainer', NAME), 1);
  const err = await s.provider.suspend({ id: 'cap-nothing' }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'not_found'), String(err));
});

t.test('persistent workspaces: made once, labelled by key, kept by destroy, removed only when unused', async (t) => {
  const s = fakeSandbox();
  const persistent = spec('none', { workspace: { key: 'proj', durability: 'persistent' } });
  await s.provider.create(persistent);
  t.same(s.engine.volumes.get('cap-ws.proj')?.body.Labels, { 'dev.capybara.test': 'fake', 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.workspace': 'proj' });
  await s.provider.create(persistent);
  t.equal(s.engine.count('createVolume', 'cap-ws.proj'), 1, 'an existing workspace is not made again');
  const inUse = await s.provider.destroyWorkspace('proj').catch((e: unknown) => e);
  t.ok(isSandboxError(inUse, 'workspace_in_use'), String(inUse));
  await s.provider.destroy({ id: NAME });
  t.ok(s.engine.volumes.has('cap-ws.proj'), 'destroy keeps it');
  s.engine.failOnce('removeVolume', 'cap-ws.proj', 500, 'engine busy');
  const busy = await s.provider.destroyWorkspace('proj').catch((e: unknown) => e);
  t.ok(isSandboxError(busy, 'engine_error'), 'another failure is passed on as it is');
  await s.provider.destroyWorkspace('proj');
  t.notOk(s.engine.volumes.has('cap-ws.proj'));
});

t.test('a shared network another replica creates meanwhile is used', async (t) => {
  const s = fakeSandbox();
  s.engine.beforeCall((call) => {
    if (call.method === 'createNetwork' && call.target === SHARED && s.engine.networkNamed(SHARED) === undefined) {
      s.engine.putNetwork('other', { Name: SHARED, Options: { 'com.docker.network.bridge.enable_icc': 'false' } });
    }
  });
  await s.provider.create(spec('allowlist'));
  t.equal(s.engine.networkNamed(SHARED)?.id, 'other');
  t.ok(s.engine.reachable(NAME, EGRESS));
});

t.test('a persistent workspace that exists already is used only when it holds the spec\'s diskMb', async (t) => {
  const withDisk = (key: string, diskMb?: number) => ({
    id: ID,
    image: IMAGES.sandbox,
    limits: { egress: 'none' as const, ...(diskMb === undefined ? {} : { diskMb }) },
    workspace: { key, durability: 'persistent' as const },
  });
  const rows = [
    { name: 'made with a larger size', made: { driver: 'quota', size: 100_000 }, asked: 100, refused: true },
    { name: 'made without a size', made: { driver: 'quota', size: undefined }, asked: 100, refused: true },
    { name: 'made on the local driver, before the deployment had a volume driver', made: { driver: undefined, size: undefined }, asked: 100, refused: true },
    { name: 'made with the same size', made: { driver: 'quota', size: 100 }, asked: 100, refused: false },
    { name: 'made with a smaller size', made: { driver: 'quota', size: 50 }, asked: 100, refused: false },
    { name: 'no diskMb asked', made: { driver: 'quota', size: 100_000 }, asked: undefined, refused: false },
  ] as const;
  for (const row of rows) {
    const s = fakeSandbox({ volumeDriver: 'quota' });
    s.engine.volumeDrivers.add('quota');
    // The workspace as an earlier sandbox (or an earlier config) left it.
    const first = row.made.driver === undefined ? s.withConfig({ volumeDriver: '' }) : s.provider;
    await first.create(withDisk('proj', row.made.size));
    await first.destroy({ id: NAME });
    const err = await s.provider.create(withDisk('proj', row.asked)).then(() => undefined, (e: unknown) => e);
    if (row.refused) {
      t.ok(isSandboxError(err, 'limit_not_expressible'), `${row.name}: refused (${String(err)})`);
      t.match(String(err), /cap-ws\.proj/, `${row.name}: the error names the workspace`);
      t.same(leftOver(s, NAME), [], `${row.name}: nothing of the sandbox is left`);
      t.ok(s.engine.volumes.has('cap-ws.proj'), `${row.name}: the workspace is kept`);
    } else {
      t.equal(err, undefined, `${row.name}: made`);
    }
  }
});
