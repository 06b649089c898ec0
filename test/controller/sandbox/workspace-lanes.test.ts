/**
 * A persistent workspace's creates, starts and removal run one at a time in a controller process
 * (sandbox-lanes.ts, workspaceLane). Before, a destroyWorkspace landing between a create's look at
 * the volume and its container create removed the volume, dockerd made a plain one in its place
 * (no quota driver: diskMb not enforced, for this sandbox and every later one on the key), and two
 * creates or resumes on one key both passed the check that no other sandbox runs on it (review
 * findings). Across controller processes the engine has no lock to take: docs/controller.md says so.
 */
import t from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

const spec = (id: string, diskMb?: number) => ({
  id,
  image: IMAGES.sandbox,
  limits: { egress: 'none' as const, ...(diskMb === undefined ? {} : { diskMb }) },
  workspace: { key: 'proj', durability: 'persistent' as const },
});

type Fake = ReturnType<typeof fakeSandbox>;
const runningOn = (s: Fake): string[] =>
  [...s.engine.containers.entries()].filter(([, c]) => c.state === 'running' && c.body.Labels?.['dev.capybara.sandbox.workspace'] === 'proj').map(([name]) => name).sort();

t.test('a destroyWorkspace called while a create on its key runs waits for it, and never leaves a plain volume in the workspace\'s place', async (t) => {
  const s = fakeSandbox({ volumeDriver: 'quota' });
  s.engine.volumeDrivers.add('quota');
  let removal: Promise<unknown> | undefined;
  s.engine.beforeCall(async (call) => {
    // Between the create's volume step and its container create, where the removal used to land:
    // given a moment to finish there (it waits for the create now, so no longer).
    if (call.method === 'createContainer' && call.target === 'cap-a' && removal === undefined) {
      removal = s.provider.destroyWorkspace('proj').then(() => 'removed', (e: unknown) => e);
      await Promise.race([removal, new Promise((resolve) => setTimeout(resolve, 100))]);
    }
  });
  await s.provider.create(spec('a', 64));
  t.ok(isSandboxError(await removal, 'workspace_in_use'), 'the removal came after the create, and the running sandbox holds the volume');
  t.equal((s.engine.volumes.get('cap-ws.proj')?.body as { Driver?: string } | undefined)?.Driver, 'quota', 'the workspace is still the quota driver\'s');
  t.same(runningOn(s), ['cap-a']);
});

t.test('two creates on one workspace at once: one runs, the other is refused workspace_in_use', async (t) => {
  const s = fakeSandbox();
  const results = await Promise.allSettled([s.provider.create(spec('a')), s.provider.create(spec('b'))]);
  t.equal(runningOn(s).length, 1, `one sandbox runs on the workspace (${runningOn(s).join(', ')})`);
  t.ok(results.some((r) => r.status === 'rejected' && isSandboxError(r.reason, 'workspace_in_use')), 'the other is refused');
});

t.test('two resumes on one workspace at once: one runs', async (t) => {
  const s = fakeSandbox();
  await s.provider.create(spec('a'));
  await s.provider.suspend({ id: 'cap-a' });
  await s.provider.create(spec('b'));
  await s.provider.suspend({ id: 'cap-b' });
  const results = await Promise.allSettled([s.provider.resume({ id: 'cap-a' }), s.provider.resume({ id: 'cap-b' })]);
  t.equal(runningOn(s).length, 1, `one sandbox runs on the workspace (${runningOn(s).join(', ')})`);
  t.ok(results.some((r) => r.status === 'rejected' && isSandboxError(r.reason, 'workspace_in_use')), 'the other is refused');
});
