/**
 * The engine script (engine-script.ts) against the real engine, called the way the controller
 * calls it (DockerEngine, on the engine's own socket): the answers the in-memory engine gives in
 * fake-engine.test.ts are the real engine's answers.
 */
import t from 'tap';
import { DockerEngine } from '../../../controller/docker/engine.js';
import { IMAGES } from '../../../common/index.js';
import { dockerTest, engineSocketPath } from '../../support/docker.js';
import { EXPECTED, runEngineScript, type ScriptEngine } from './engine-script.js';

t.test('the real engine answers the engine script', async (t) => {
  const env = await dockerTest(t, [IMAGES.sandbox]);
  if (!env) return;
  const docker = new DockerEngine({ endpoint: `unix://${engineSocketPath()}` });
  const engine: ScriptEngine = Object.assign(docker, {
    pause: async (name: string) => { await env.docker.getContainer(name).pause(); },
    disconnect: async (network: string, container: string) => { await env.docker.getNetwork(network).disconnect({ Container: container }); },
  });
  // Two /28 subnets of a block no test allocates from, picked by the run id.
  const slot = parseInt(env.runId.slice(1, 5), 16) % 2048;
  const subnet = (k: number): string => `10.254.${Math.floor((slot * 2 + k) / 16)}.${((slot * 2 + k) % 16) * 16}/28`;
  const names = {
    network: env.name('net'),
    volume: env.name('vol'),
    autoVolume: env.name('auto'),
    container: env.name('c'),
    missing: env.name('missing'),
    image: IMAGES.sandbox,
    missingImage: `capybara-missing-${env.runId}:latest`,
    labels: env.labels,
    subnetNetwork: env.name('subnet-net'),
    subnets: [subnet(0), subnet(1)] as const,
    second: env.name('second'),
  };
  t.same(await runEngineScript(engine, names), EXPECTED);
});
