/**
 * A recovery in one controller process racing a destroy of the same sandbox in another (the lanes
 * are per process): the destroy lands between the recovery's inspect and its start. The destroy
 * said done, so the recovery must not bring the sandbox back from the inspect data it read.
 */
import t from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox, leftOver } from '../../support/fake-sandbox.js';

const ID = 'rd1';
const NAME = `cap-${ID}`;

for (const egress of ['none', 'open', 'internal'] as const) {
  t.test(`a ${egress} sandbox destroyed by another process while a resume starts it stays destroyed`, async (t) => {
    const s = fakeSandbox({ allowOpenEgress: true });
    const other = s.withConfig({ allowOpenEgress: true });
    await s.provider.create({ id: ID, image: IMAGES.sandbox, limits: { egress } });
    await s.provider.suspend({ id: NAME });
    let destroyed = false;
    s.engine.beforeCall(async (call) => {
      if (!destroyed && call.method === 'startContainer' && call.target === NAME) {
        destroyed = true;
        await other.destroy({ id: NAME });
      }
    });
    const result = await s.provider.resume({ id: NAME }).then((r) => r, (err: unknown) => err);
    t.ok(destroyed, 'the destroy landed before the start');
    t.ok(result === 'gone' || isSandboxError(result, 'conflict') || isSandboxError(result, 'not_found'), `the resume says so: ${String(result)}`);
    t.same(leftOver(s, NAME), [], 'nothing of the destroyed sandbox is made again');
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
    let armed = true;
    s.engine.beforeCall(async (call) => {
      if (armed && call.method === at) {
        armed = false;
        await other.destroy({ id: NAME });
      }
    });
    const result = await s.provider.resume({ id: NAME }).then((r) => r, (err: unknown) => err);
    t.notOk(armed, 'the destroy landed there');
    t.ok(result === 'gone' || isSandboxError(result, 'conflict') || isSandboxError(result, 'not_found'), `the resume says so: ${String(result)}`);
    t.same(leftOver(s, NAME), [], 'nothing of the destroyed sandbox is made again');
  });
}
