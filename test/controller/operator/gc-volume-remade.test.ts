/**
 * gc removes a volume by name, and a create of the same sandbox name makes its volumes again
 * under the same names (after its destroy of the stale instance took the old ones): between gc's
 * listing and its removal, the volume of that name can be the new create's, before the sandbox
 * container exists to keep it. Removed then, the container's create had dockerd make the volume
 * again by itself: no labels (nothing destroys it), no size.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import Docker from 'dockerode';
import pino from 'pino';
import { engineSocketPath, TEST_LABEL } from '../../support/docker.js';
import { DockerEngine } from '../../../controller/docker/index.js';
import { collectGarbage } from '../../../controller/operator/gc.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

t.test('gc keeps a volume a create made again since the listing', async (t) => {
  const docker = new Docker({ socketPath: engineSocketPath() });
  const runId = `tr2${randomBytes(4).toString('hex')}`;
  const sandbox = `cap-tr2-${runId}`;
  const volume = `${sandbox}-workspace`;
  const labels = { [TEST_LABEL]: runId, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': sandbox };
  await docker.createVolume({ Name: volume, Labels: labels });
  t.teardown(() => docker.getVolume(volume).remove().catch(() => undefined));
  // Docker's CreatedAt counts seconds: the new volume must be born in a later one.
  await new Promise((r) => setTimeout(r, 1_100));

  let remade = false;
  class RacingEngine extends DockerEngine {
    // gc's look-up of the sandbox container just before the removal: a create is under way.
    override async inspectContainer(name: string): ReturnType<DockerEngine['inspectContainer']> {
      if (!remade) {
        remade = true;
        await docker.getVolume(volume).remove();
        await docker.createVolume({ Name: volume, Labels: labels });
      }
      return super.inspectContainer(name);
    }
  }
  const engine = new RacingEngine({ endpoint: `unix://${engineSocketPath()}`, logger: pino({ level: 'silent' }) });
  const results = await collectGarbage(engine, { dryRun: false, minAgeMs: 0, extraLabels: { [TEST_LABEL]: runId }, nowMs: Date.now() + 60_000, sharedNetwork: `cap-tr2-${runId}-net` });
  t.ok(remade, 'the create ran between the listing and the removal');
  t.same(results.map((r) => [r.kind, r.name]), [['volume', volume]]);
  t.not(results[0]?.action, 'removed', 'the new volume is not removed');
  t.ok(await docker.getVolume(volume).inspect().then(() => true, () => false), 'the create\'s volume is still there');
});
