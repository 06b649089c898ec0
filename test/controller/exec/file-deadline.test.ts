/**
 * A file script (readFile, writeFile, stat) runs as a user whose other processes may stop it
 * (SIGSTOP needs nothing but the same uid), so the controller waits on it only until a deadline of
 * its own. On the in-memory engine, an exec that never ends stands for one a leftover stopped (a
 * review held readFile for good so). The probe's deadline: test/controller/sandbox/probe-deadline.test.ts.
 */
import t from 'tap';
import { IMAGES } from '../../../common/index.js';
import { fileScriptDeadlineMs } from '../../../controller/exec/files.js';
import { isSandboxError } from '../../../controller/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';

t.test('a file script that never ends fails within its deadline', async (t) => {
  t.equal(fileScriptDeadlineMs(4096), 31_000, 'a stat: 30 s and a second for its first megabyte');
  t.equal(fileScriptDeadlineMs(64_000_000), 94_000, 'a second more per megabyte moved');
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'stuck-file', image: IMAGES.sandbox, limits: { egress: 'none' } });
  const normal = s.engine.onExec;
  s.engine.onExec = (container, request) => (request.cmd.join(' ').includes('stat') ? new Promise(() => undefined) : normal(container, request));
  const started = Date.now();
  const err = await s.provider.stat(h, '/workspace/x').then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(err, 'file_error'), String(err));
  t.match((err as Error).message, /did not finish within 31 s: a process in the sandbox may have stopped it/);
  t.ok(Date.now() - started < 35_000, `settled in ${Date.now() - started} ms`);
});
