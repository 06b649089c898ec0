/**
 * The engine script (engine-script.ts) against the real engine, called the way the controller
 * calls it (DockerEngine, on the engine's own socket): the answers the in-memory engine gives in
 * fake-engine.test.ts are the real engine's answers.
 */
import t from 'tap';
import { DockerEngine } from '../../controller/docker/engine.js';
import { IMAGES } from '../../common/index.js';
import { dockerTest, engineSocketPath } from '../support/docker.js';
import { EXPECTED, runEngineScript, type ScriptEngine } from './engine-script.js';

t.test('the real engine answers the engine script', async (t) => {
  const env = await dockerTest(t, [IMAGES.sandbox]);
  if (!env) return;
  const docker = new DockerEngine({ endpoint: `unix://${engineSocketPath()}` });
  const engine: ScriptEngine = Object.assign(docker, { pause: async (name: string) => { await env.docker.getContainer(name).pause(); } });
  const names = {
    network: env.name('net'),
    volume: env.name('vol'),
    autoVolume: env.name('auto'),
    container: env.name('c'),
    missing: env.name('missing'),
    image: IMAGES.sandbox,
    missingImage: `capybara-missing-${env.runId}:latest`,
    labels: env.labels,
  };
  t.same(await runEngineScript(engine, names), EXPECTED);
});
