/**
 * An abort that comes while the command's exec is being started (the engine's create and start
 * calls, or a `fresh` kill before them) is not lost: the command is killed once it exists, instead
 * of running on to its timeout after the caller cancelled it.
 */
import t from 'tap';
import type { ExecRequest, ExecRun } from '../../../controller/docker/engine.js';
import { KILL_OK_MARKER, STARTED_BYTE, SURVIVORS_MARKER } from '../../../controller/exec/exec-script.js';
import { isCommand, standInRunner } from '../../support/stand-in-runner.js';

const START = Buffer.from([STARTED_BYTE]);

t.test('an abort during the exec\'s start kills the command', async (t) => {
  const abort = new AbortController();
  const kills: string[][] = [];
  let endCommand: (code: number | null) => void = () => undefined;
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    if (!isCommand(request)) {
      kills.push([...request.cmd]);
      // The kill script ends the command, then says so.
      endCommand(137);
      request.onOutput('stdout', Buffer.from(`${KILL_OK_MARKER}\n`));
      return { id: 'kill', finished: Promise.resolve(0), detach: () => undefined };
    }
    // The caller cancels while the engine is still starting the exec.
    abort.abort();
    await new Promise((r) => setTimeout(r, 20));
    request.onOutput('stderr', START);
    const finished = new Promise<number | null>((resolve) => {
      endCommand = resolve;
    });
    return { id: 'cmd', finished, detach: () => endCommand(null) };
  });
  const began = Date.now();
  const result = await runner.exec('cap-x', 'sleep 1000', { signal: abort.signal, timeoutMs: 30_000 });
  t.equal(result.aborted, true, 'the result is the abort');
  t.equal(result.timedOut, false, 'not the timeout');
  t.equal(kills.length, 1, 'the command was killed');
  t.ok(Date.now() - began < 10_000, 'at once, not at the timeout');
});

t.test('an abort during fresh\'s kill of everything starts no command', async (t) => {
  const abort = new AbortController();
  const commands: string[][] = [];
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    if (isCommand(request)) {
      commands.push([...request.cmd]);
      request.onOutput('stderr', START);
      return { id: 'cmd', finished: Promise.resolve(0), detach: () => undefined };
    }
    if (request.cmd[3] === 'capybara-killall') {
      // The caller cancels while the sandbox is being freed for its command.
      abort.abort();
      request.onOutput('stdout', Buffer.from(`${KILL_OK_MARKER}\n`));
    } else {
      request.onOutput('stdout', Buffer.from(`${SURVIVORS_MARKER} 0\n`));
    }
    return { id: 'kill', finished: Promise.resolve(0), detach: () => undefined };
  });
  const result = await runner.exec('cap-x', 'rm -rf /workspace/*', { signal: abort.signal, fresh: true });
  t.equal(result.aborted, true, 'the result is the abort');
  t.equal(result.exitCode, null);
  t.same(commands, [], 'the command never started');
});

t.test('a command whose exit the engine could not report is killed, not left running to its backstop', async (t) => {
  const kills: string[][] = [];
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    if (!isCommand(request)) {
      kills.push([...request.cmd]);
      request.onOutput('stdout', Buffer.from(`${KILL_OK_MARKER}\n`));
      return { id: 'kill', finished: Promise.resolve(0), detach: () => undefined };
    }
    request.onOutput('stderr', START);
    // The command closed its output and runs on; one of the engine's looks at it failed.
    const finished = new Promise<number | null>((_, reject) => setTimeout(() => reject(new Error('exec inspect failed')), 20));
    finished.catch(() => undefined);
    return { id: 'cmd', finished, detach: () => undefined };
  });
  const err = await runner.exec('cap-x', 'exec >&- 2>&-; sleep 100000', { timeoutMs: 30_000 }).then(() => undefined, (e: unknown) => e);
  t.match(String(err), /exec inspect failed/, 'the engine\'s failure is the caller\'s error');
  t.equal(kills.length, 1, 'and the command was killed');
});
