/**
 * `ls` (and doctor's sandboxes_egress) on the shared egress, on the in-memory engine: a sandbox's
 * egress is the state of its own deployment's shard, never that of another deployment's shard of
 * the same number on the same engine.
 */
import t from 'tap';
import type { DockerEngine } from '../../../controller/docker/index.js';
import { readInventory, sandboxRows } from '../../../controller/operator/inventory.js';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

const spec = (id: string) => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts: ['pypi.org'] } });

t.test('a sandbox whose shard is gone is missing, though another deployment has a shard 0', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  await s.provider.create(spec('a'));
  await s.withConfig({ egressIsolation: 'shared', network: 'capother' }).create(spec('b'));
  t.ok(s.engine.containers.has('cap-egress.0.capother'), 'the other deployment\'s shard 0');
  const engine = s.engine as unknown as DockerEngine;
  const rows = async (): Promise<Array<[string, string]>> => sandboxRows(await readInventory(engine, {}, 'ls'), Date.now(), 'capybara-sandbox').map((r) => [r.name, r.egress]);
  t.same(await rows(), [['cap-a', 'running'], ['cap-b', 'running']]);
  await s.engine.removeContainer('cap-egress.0.capybara-sandbox');
  t.same((await rows())[0], ['cap-a', 'missing'], 'its shard is gone: missing, not the other shard\'s state');
});
