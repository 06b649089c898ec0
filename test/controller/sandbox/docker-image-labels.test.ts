/**
 * dockerd merges an image's labels into its container's for every key the create body does not
 * set. An image that carries a label of the controller's put it on the sandbox's container, and
 * the controller believed it: with `dev.capybara.sandbox.workspace=KEY` a sandbox of that image
 * held another tenant's persistent workspace (whose creates were refused `workspace_in_use` while
 * it ran), with `dev.capybara.sandbox.egress-isolation=shared` recovery looked for a shard of the
 * shared egress for a sandbox with a proxy of its own (review finding). Real engine, real proxy.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';
import { isSandboxError } from '../../../controller/index.js';

await fileNeeds(t, 'engine');

const imageTag = (runId: string): string => `capybara-sandbox-labels-test:${runId}`;

t.test('an image carrying the controller\'s labels is refused, and takes no other sandbox\'s workspace', async (t) => {
  const s = await sandboxTestEnv(t, (runId) => [imageTag(runId)]);
  if (!s) return;
  const { provider, env } = s;
  const key = `${env.runId}-victim`;
  const image = imageTag(env.runId);
  const dockerfile = [
    `FROM ${SANDBOX_IMAGE}`,
    `LABEL dev.capybara.sandbox.workspace=${key}`,
    ...Object.entries(env.labels).map(([k, v]) => `LABEL ${k}=${v}`),
  ].join('\n');
  execFileSync('docker', ['build', '--quiet', '--pull=false', '--network=none', '-t', image, '-'], { input: dockerfile, stdio: ['pipe', 'ignore', 'pipe'], env: { ...process.env, DOCKER_BUILDKIT: '0' } });
  t.teardown(() => env.docker.getImage(image).remove({ force: true }).catch(() => undefined));
  t.teardown(() => provider.destroyWorkspace(key).catch(() => undefined));

  const evilId = `${env.runId}-labelled`;
  const evil = await provider.create({ id: evilId, image, limits: { egress: 'none' } }).then(
    (h) => {
      t.teardown(() => provider.destroy(h));
      return h;
    },
    (err: unknown) => err,
  );
  t.ok(isSandboxError(evil, 'invalid_spec'), `the create is refused (${String(evil)})`);
  t.match(String(evil), /dev\.capybara\.sandbox\.workspace/, 'naming the label');
  t.same(await s.labelled(`cap-${evilId}`), [], 'and leaves nothing behind');

  const victim = await provider.create({ id: `${env.runId}-owner`, image: SANDBOX_IMAGE, limits: { egress: 'none' }, workspace: { key, durability: 'persistent' } });
  t.teardown(() => provider.destroy(victim));
  t.equal((await provider.exec(victim, 'echo mine > /workspace/f && cat /workspace/f')).stdout, 'mine\n', 'the workspace\'s owner runs on it');
});
