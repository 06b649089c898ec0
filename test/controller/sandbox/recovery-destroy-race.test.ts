/**
 * A recovery in one controller process racing a destroy of the same sandbox in another (the lanes
 * are per process): the destroy lands between the recovery's inspect and its start. The destroy
 * said done, so the recovery must not bring the sandbox back from the inspect data it read.
 */
import t, { type Test } from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox, leftOver } from '../../support/fake-sandbox.js';

const ID = 'rd1';
const NAME = `cap-${ID}`;

type Sandbox = ReturnType<typeof fakeSandbox>;
type EngineCall = Parameters<Parameters<Sandbox['engine']['beforeCall']>[0]>[0];

/**
 * Resumes the sandbox while `other` (another controller process) destroys it just before the
 * first engine call `at` matches, and judges what the resume leaves: it says the sandbox is gone,
 * and nothing of it is made again. Whether the destroy landed.
 */
async function resumeDestroyedAt(t: Test, s: Sandbox, other: ReturnType<Sandbox['withConfig']>, at: (call: EngineCall) => boolean): Promise<boolean> {
  let landed = false;
  s.engine.beforeCall(async (call) => {
    if (!landed && at(call)) {
      landed = true;
      await other.destroy({ id: NAME });
    }
  });
  const result = await s.provider.resume({ id: NAME }).then((r) => r, (err: unknown) => err);
  t.ok(result === 'gone' || isSandboxError(result, 'conflict') || isSandboxError(result, 'not_found'), `the resume says so: ${String(result)}`);
  t.same(leftOver(s, NAME), [], 'nothing of the destroyed sandbox is made again');
  return landed;
}

for (const egress of ['none', 'open', 'internal'] as const) {
  t.test(`a ${egress} sandbox destroyed by another process while a resume starts it stays destroyed`, async (t) => {
    const s = fakeSandbox({ allowOpenEgress: true });
    const other = s.withConfig({ allowOpenEgress: true });
    await s.provider.create({ id: ID, image: IMAGES.sandbox, limits: { egress } });
    await s.provider.suspend({ id: NAME });
    const landed = await resumeDestroyedAt(t, s, other, (call) => call.method === 'startContainer' && call.target === NAME);
    t.ok(landed, 'the destroy landed before the start');
  });
}

for (const [egress, at] of [['internal', 'listNetworks'], ['allowlist', 'listNetworks'], ['allowlist', 'createNetwork']] as const) {
  t.test(`a ${egress} sandbox destroyed by another process at a resume's ${at}: no network is made again, or kept`, async (t) => {
    const s = fakeSandbox();
    const other = s.withConfig({});
    await s.provider.create({ id: ID, image: IMAGES.sandbox, limits: egress === 'allowlist' ? { egress, allowHosts: ['example.com'] } : { egress } });
    await s.provider.suspend({ id: NAME });
    // Its network removed while it was stopped, so that the resume makes it again.
    if (at === 'createNetwork') await s.engine.removeNetwork(s.engine.networkNamed(`${NAME}-net`)?.id ?? '');
    const landed = await resumeDestroyedAt(t, s, other, (call) => call.method === at);
    t.ok(landed, 'the destroy landed there');
  });
}

t.test('a destroy in another process between a rebuild\'s create and its start leaves no container of the sandbox behind', async (t) => {
  const s = fakeSandbox();
  const other = s.withConfig({});
  await s.provider.create({ id: ID, image: IMAGES.sandbox, limits: { egress: 'internal' } });
  await s.provider.suspend({ id: NAME });
  // Its network removed while it was stopped: the resume makes it again, then the container.
  await s.engine.removeNetwork(s.engine.networkNamed(`${NAME}-net`)?.id ?? '');
  // The other process's destroy removes the container and volumes just as the rebuild removes the
  // old container, and the network only once the rebuild has made its new one (which, not
  // started, holds no endpoint there), before the rebuild starts it.
  let phase = 0;
  let destroying: Promise<unknown> = Promise.resolve();
  let atNetwork!: () => void;
  const destroyAtNetwork = new Promise<void>((r) => (atNetwork = r));
  let releaseNetwork!: () => void;
  const networkReleased = new Promise<void>((r) => (releaseNetwork = r));
  s.engine.beforeCall(async (call) => {
    if (phase === 0 && call.method === 'removeContainer' && call.target === NAME) {
      phase = 1;
      destroying = other.destroy({ id: NAME }).then(() => 'destroyed', (err: unknown) => err);
      await destroyAtNetwork;
    } else if (phase === 1 && call.method === 'removeNetwork') {
      phase = 2;
      atNetwork();
      await networkReleased;
    } else if (phase === 2 && call.method === 'startContainer' && call.target === NAME) {
      phase = 3;
      releaseNetwork();
      await destroying;
    }
  });
  const result = await s.provider.resume({ id: NAME }).then((r) => r, (err: unknown) => err);
  t.equal(phase, 3, 'the destroy landed between the rebuild\'s create and its start');
  t.equal(await destroying, 'destroyed', 'the destroy said done');
  t.ok(isSandboxError(result, 'conflict'), `the resume says so: ${String(result)}`);
  // Before, the rebuilt container stayed, never started: a sandbox to ls and gc, which the next
  // resume would have brought back.
  t.notOk(s.engine.containers.has(NAME), 'the rebuilt container is gone');
  t.same(leftOver(s, NAME), [`${NAME}-skills`, `${NAME}-workspace`], 'left: the volumes its create made again, unlabelled');
  t.notOk(Object.keys(s.engine.volumes.get(`${NAME}-workspace`)?.body.Labels ?? {}).length, 'empty ones, not the sandbox\'s');
  await s.provider.create({ id: ID, image: IMAGES.sandbox, limits: { egress: 'internal' } });
  await s.provider.destroy({ id: NAME });
  t.same(leftOver(s, NAME), [], 'the next create and destroy of the name take them');
});
