/**
 * The egress probe of resume is an exec the controller waits on, which a process of the sandbox
 * user could stop (SIGSTOP needs nothing but the same uid) when it ran as that user. It runs as
 * root now, and has a deadline of the controller's own, so nothing in the sandbox decides how
 * long resume, or the calls queued behind it on the sandbox, wait. On the in-memory engine, an
 * exec that never ends stands for one a leftover stopped (a review held resume, and a destroy
 * behind it, for good so). The file scripts' deadline: test/controller/exec/file-deadline.test.ts.
 */
import t from 'tap';
import { IMAGES } from '../../../common/index.js';
import { isSandboxError } from '../../../controller/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

const settledWithin = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  Promise.race([p.then(() => true, () => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

t.test('a resume whose egress probe never ends fails within its deadline, and a destroy behind it goes on', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'stuck-probe', image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'] } });
  const normal = s.engine.onExec;
  let probeUser: string | undefined;
  s.engine.onExec = (container, request) => {
    if (request.cmd[0] === 'timeout' && request.cmd.join(' ').includes('/dev/tcp/')) {
      probeUser = request.user;
      return new Promise(() => undefined);
    }
    return normal(container, request);
  };
  const started = Date.now();
  const resumed = await s.provider.resume(h).then(() => undefined, (err: unknown) => err);
  t.ok(isSandboxError(resumed, 'egress_unavailable'), `resume fails as the proxy not answering (${String(resumed)})`);
  t.ok(Date.now() - started < 25_000, `within the probe's 15 s and the controller's grace (${Date.now() - started} ms)`);
  t.equal(probeUser, '0:0', 'the probe runs as root, whom the sandbox user cannot signal');
  t.ok(await settledWithin(s.provider.destroy(h), 5_000), 'a destroy after it is not held');
});

// The registration is read by a `cat` in the egress container as the proxy's own user, whom a
// proxy process taken over by what it serves could stop: on a shard, every sandbox's resume, the
// check before each of their commands and a destroy queued behind either waited on it for good.
t.test('a resume whose registration read never ends fails within its deadline, and a destroy behind it goes on', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'stuck-read', image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'] } });
  const normal = s.engine.onExec;
  let reads = 0;
  s.engine.onExec = (container, request) => {
    if (request.cmd[0] === 'cat') {
      reads += 1;
      return new Promise(() => undefined);
    }
    return normal(container, request);
  };
  const started = Date.now();
  const resumed = await s.provider.resume(h).then(() => undefined, (err: unknown) => err);
  t.ok(reads > 0, 'the resume read the registration');
  t.ok(isSandboxError(resumed, 'engine_error'), `resume fails saying the read did not finish (${String(resumed)})`);
  t.match((resumed as Error).message, /could not be read within 30 s/);
  t.ok(Date.now() - started < 40_000, `within the read's 30 s (${Date.now() - started} ms)`);
  t.ok(await settledWithin(s.provider.destroy(h), 5_000), 'a destroy after it is not held');
});
