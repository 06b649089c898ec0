/**
 * When an exec has ended (engine-exec.ts exitCode): its output stream can end while the command
 * still runs, when the connection is cut on the way (the socket proxy ends one idle for an hour, a
 * command silent that long). The run is finished only once the engine says the command ended,
 * never while it still runs, so its caller's timeout still applies and kills it; a detach or a
 * gone exec ends the wait.
 */
import t from 'tap';
import { Duplex } from 'node:stream';
import { startExec } from '../../../controller/docker/engine-exec.js';
import type { EngineCaller } from '../../../controller/docker/engine-call.js';

/** An engine whose exec output ends at once, and whose exec inspect says it runs `runningFor` more times (Infinity: always). */
function engine(runningFor: number, exit: { code: number } | 'gone' = { code: 3 }): { engine: EngineCaller; asked: () => number } {
  let asked = 0;
  const caller = {
    call: async (_what: string, _method: string, path: string) => {
      if (path.endsWith('/exec')) return { Id: 'b'.repeat(64) };
      if (path.endsWith('/start')) {
        const output = new Duplex({ read() {}, write(_c, _e, done) { done(); } });
        output.push(null);
        return output;
      }
      asked += 1;
      if (asked <= runningFor) return { Running: true, ExitCode: 0 };
      return exit === 'gone' ? undefined : { Running: false, ExitCode: exit.code };
    },
    optional: async <T>(p: Promise<T>) => p,
  } as unknown as EngineCaller;
  return { engine: caller, asked: () => asked };
}

const request = { cmd: ['sleep', '3600'], user: '1000:1000', onOutput: () => undefined };

t.test('output cut while the command runs: finished only once the engine says it ended, with its exit code', async (t) => {
  // Past the first twenty quick answers (about 5 s), then once a second.
  const e = engine(23);
  const run = await startExec(e.engine, 'cap-x', request);
  t.equal(await run.finished, 3, 'the command\'s own exit code, not null');
  t.equal(e.asked(), 24, 'asked until the engine said it ended');
});

t.test('a caller that detaches stops the wait: null', async (t) => {
  const e = engine(Infinity);
  const run = await startExec(e.engine, 'cap-x', request);
  let settled = false;
  void run.finished.then(() => (settled = true));
  await new Promise((r) => setTimeout(r, 6_500));
  t.notOk(settled, 'still waiting while the engine says it runs');
  run.detach();
  const started = Date.now();
  // Raced with a deadline, so that a detach that does not stop the wait fails here, not at the
  // file's timeout. The next poll is at most a second away; the bound leaves a loaded machine two.
  const outcome = await Promise.race([run.finished, new Promise((r) => setTimeout(() => r('still waiting'), 5_000).unref())]);
  t.equal(outcome, null);
  t.ok(Date.now() - started < 3_000, `within the next poll (${Date.now() - started} ms)`);
});

t.test('an exec (or its container) gone while waited for: null', async (t) => {
  const e = engine(2, 'gone');
  const run = await startExec(e.engine, 'cap-x', request);
  t.equal(await run.finished, null);
});
