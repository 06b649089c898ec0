/**
 * The rules a stopped sandbox meets again at its next start (controller/spec/start-rules.ts), from
 * what the engine stored for it: its tier, image, CPU and memory caps and runtime against the deployment's
 * config now.
 */
import t from 'tap';
import { parseDeploymentConfig } from '../../../controller/spec/config.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import { startRefusal, type StoredSandbox } from '../../../controller/spec/start-rules.js';

const MIB = 1024 * 1024;
const stored = (more: Partial<StoredSandbox> = {}, hostConfig: Record<string, unknown> = {}): StoredSandbox => ({
  image: 'capybara-sandbox:latest',
  tier: 'allowlist',
  hostConfig: { Memory: 1024 * MIB, NanoCpus: 1e9, ...hostConfig },
  ...more,
});

t.test('a sandbox within today\'s rules starts', async (t) => {
  const config = parseDeploymentConfig({ endpoint: 'tcp://p:1', allowedImages: ['capybara-sandbox:latest'] });
  t.equal(startRefusal('cap-a', stored(), config), undefined);
  t.equal(startRefusal('cap-a', stored({}, { Memory: config.maxLimits.memoryMb * MIB, NanoCpus: config.maxLimits.cpu * 1e9 }), config), undefined, 'at the ceilings exactly');
});

t.test('an image no longer allowed, or caps above lowered ceilings, are not started again', async (t) => {
  const narrowed = parseDeploymentConfig({ endpoint: 'tcp://p:1', allowedImages: ['other:1'], maxLimits: { cpu: 0.5, memoryMb: 512 } });
  const image = startRefusal('cap-a', stored(), narrowed);
  t.ok(isSandboxError(image, 'invalid_spec'));
  t.match(image?.message, /"capybara-sandbox:latest", which is not one of the deployment's allowedImages now.*capybara-sandbox destroy cap-a/);
  const lowered = parseDeploymentConfig({ endpoint: 'tcp://p:1', maxLimits: { cpu: 0.5, memoryMb: 512 } });
  t.match(startRefusal('cap-a', stored(), lowered)?.message, /memory limit of 1024 MiB, above this deployment's maximum of 512 .*maxLimits\.memoryMb/);
  t.match(startRefusal('cap-a', stored({}, { Memory: 256 * MIB }), lowered)?.message, /CPU limit of 1, above this deployment's maximum of 0\.5 .*maxLimits\.cpu/);
  t.equal(startRefusal('cap-a', stored({}, { Memory: 256 * MIB, NanoCpus: 0.5e9 }), lowered), undefined);
});

t.test('no cap at all is over any ceiling (a container not made by this controller)', async (t) => {
  const config = parseDeploymentConfig({ endpoint: 'tcp://p:1' });
  for (const hostConfig of [{ Memory: 0 }, { Memory: undefined }, { Memory: '1024' }, { NanoCpus: 0 }, { NanoCpus: -1 }]) {
    t.ok(isSandboxError(startRefusal('cap-a', stored({}, hostConfig), config), 'invalid_spec'), JSON.stringify(hostConfig));
  }
});

t.test('open egress needs allowOpenEgress now, as at create', async (t) => {
  const closed = parseDeploymentConfig({ endpoint: 'tcp://p:1' });
  t.ok(isSandboxError(startRefusal('cap-a', stored({ tier: 'open' }), closed), 'open_egress_disabled'));
  const open = parseDeploymentConfig({ endpoint: 'tcp://p:1', allowOpenEgress: true });
  t.equal(startRefusal('cap-a', stored({ tier: 'open' }), open), undefined);
});

t.test('a deployment that runs sandboxes under gVisor does not start one made under runc again', async (t) => {
  const gvisor = parseDeploymentConfig({ endpoint: 'tcp://p:1', runtime: 'runsc' });
  for (const runtime of ['runc', undefined, '', 'io.containerd.runc.v2']) {
    const refused = startRefusal('cap-a', stored({}, { Runtime: runtime }), gvisor);
    t.ok(isSandboxError(refused, 'invalid_spec'), `Runtime ${JSON.stringify(runtime)}`);
    t.match(refused?.message, /runs sandboxes under gVisor .*capybara-sandbox destroy cap-a/);
  }
  t.equal(startRefusal('cap-a', stored({}, { Runtime: 'runsc' }), gvisor), undefined, 'one made under runsc starts');
  const runc = parseDeploymentConfig({ endpoint: 'tcp://p:1' });
  t.equal(startRefusal('cap-a', stored({}, { Runtime: 'runsc' }), runc), undefined, 'runc deployments start either');
  t.equal(startRefusal('cap-a', stored({}, { Runtime: 'runc' }), runc), undefined);
});
