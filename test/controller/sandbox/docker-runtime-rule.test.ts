/**
 * A deployment that moves its sandboxes to gVisor (`runtime: runsc`) does not bring back a sandbox
 * made under runc: a resume, or the start before a command, started it again on the host's kernel
 * (and a rebuild copied runc), so a conversation kept suspended across the change kept runc
 * (review finding). Real engine, real proxy; the sandbox is never started under runsc.
 */
import t from 'tap';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';
import { createDockerSandbox, isSandboxError } from '../../../controller/index.js';

await fileNeeds(t, 'engine');

t.test('a sandbox made under runc is not started again where sandboxes now run under runsc', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env, proxy, sharedNetwork } = s;
  const h = await provider.create({ id: `${env.runId}-runc`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
  t.teardown(() => provider.destroy(h));
  t.equal((await s.inspect(h.id)).HostConfig.Runtime, 'runc', 'made under runc');
  await provider.suspend(h);

  const gvisor = createDockerSandbox({ endpoint: proxy.endpoint, network: sharedNetwork, runtime: 'runsc' }, { labels: env.labels });
  const resumed = await gvisor.resume(h).then(() => undefined, (err: unknown) => err);
  t.ok(isSandboxError(resumed, 'invalid_spec'), `resume is refused (${String(resumed)})`);
  const ran = await gvisor.exec(h, 'echo ran').then(() => undefined, (err: unknown) => err);
  t.ok(isSandboxError(ran, 'invalid_spec'), 'and so is a command');
  t.equal((await s.inspect(h.id)).State.Running, false, 'it stays stopped');
  await gvisor.destroy(h);
  t.same(await s.labelled(h.id), [], 'and can still be destroyed');
});
