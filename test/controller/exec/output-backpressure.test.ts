/**
 * Streamed output and a slow reader. `capybara-sandbox exec NAME -- cmd | reader` writes the
 * command's output to a pipe, which Node writes asynchronously, queueing what the reader has not
 * taken; nothing asked the exec to wait, so a command writing faster than the reader reads (`cat`
 * of a large file, `yes`) had all of its output pile up in the CLI's memory (real engine: `head
 * -c 300M /dev/zero` into a pipe read after 3 s held 300 MB queued; review finding). A sink that
 * cannot take more returns a promise, and no more output is read until it settles: the CLI's
 * writer (on a write held back), CommandRunner (the caller's onOutput's promise passed back) and
 * the exec's connection (paused meanwhile), each with a stand-in for the others.
 */
import t from 'tap';
import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import { startExec } from '../../../controller/docker/engine-exec.js';
import type { EngineCaller } from '../../../controller/docker/engine-call.js';
import type { ExecRequest, ExecRun } from '../../../controller/docker/engine.js';
import { KILL_OK_MARKER, STARTED_BYTE } from '../../../controller/exec/exec-script.js';
import { runExecCommand, type ExecCommandArgs } from '../../../controller/operator/exec-command.js';
import type { ExecResult } from '../../../controller/spec/index.js';
import { isCommand, standInRunner } from '../../support/stand-in-runner.js';

function frame(type: 1 | 2, payload: string): Buffer {
  const body = Buffer.from(payload);
  const header = Buffer.alloc(8);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

t.test('the exec\'s connection is not read while the sink waits', async (t) => {
  const duplex = new Duplex({ read() {}, write(_c, _e, done) { done(); } });
  const engine = {
    call: async (_what: string, _method: string, path: string) => {
      if (path.endsWith('/exec')) return { Id: 'a'.repeat(64) };
      if (path.endsWith('/start')) return duplex;
      return { Running: false, ExitCode: 0 };
    },
    optional: async <T>(p: Promise<T>) => p,
  } as unknown as EngineCaller;
  const seen: string[] = [];
  let release: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (release = resolve));
  const run = await startExec(engine, 'cap-x', {
    cmd: ['cat'],
    user: '1000:1000',
    onOutput: (_stream, chunk) => {
      seen.push(chunk.toString());
      return seen.length === 1 ? held : undefined;
    },
  });
  duplex.push(frame(1, 'a'));
  await tick();
  duplex.push(frame(1, 'b'));
  duplex.push(frame(2, 'c'));
  await tick();
  t.same(seen, ['a'], 'nothing more is read while the first chunk waits');
  release();
  await tick();
  await tick();
  t.same(seen, ['a', 'b', 'c'], 'the rest once it settled');
  duplex.push(null);
  t.equal(await run.finished, 0);
});

t.test('CommandRunner passes the caller\'s wait back to the exec', async (t) => {
  const waits: unknown[] = [];
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    if (!isCommand(request)) throw new Error('no kill expected');
    waits.push(request.onOutput('stdout', Buffer.from('early')));
    waits.push(request.onOutput('stderr', Buffer.from([STARTED_BYTE, 0x65])));
    waits.push(request.onOutput('stdout', Buffer.from('late')));
    // As the exec's connection does: no more output until the wait settles.
    await Promise.all(waits);
    return { id: 'command', finished: Promise.resolve(0), detach: () => undefined };
  });
  const passed: string[] = [];
  const r = await runner.exec('cap-x', 'true', {
    onOutput: (_stream: 'stdout' | 'stderr', chunk: Uint8Array) => {
      passed.push(Buffer.from(chunk).toString());
      return new Promise((resolve) => setTimeout(resolve, 10));
    },
  });
  t.equal(r.exitCode, 0);
  t.same(passed, ['early', 'e', 'late'], 'output passed on once the command began');
  t.equal(waits[0], undefined, 'stdout held before the start: nothing to wait for');
  t.ok(typeof (waits[1] as Promise<unknown> | undefined)?.then === 'function', 'the start: the held stdout and the stderr chunk\'s waits');
  t.ok(typeof (waits[2] as Promise<unknown> | undefined)?.then === 'function', 'after it: the sink\'s wait');
});

t.test('the CLI waits for a write held back before it takes more output', async (t) => {
  class SlowPipe extends EventEmitter {
    readonly chunks: Buffer[] = [];
    write(chunk: Uint8Array): boolean {
      this.chunks.push(Buffer.from(chunk));
      return false;
    }
  }
  const stdout = new SlowPipe();
  const stderr = new SlowPipe();
  const args: ExecCommandArgs = { json: false, interactive: false, tty: false, timeoutMs: undefined, maxOutputBytes: 1000 };
  let drained = false;
  const code = await runExecCommand(async (opts): Promise<ExecResult> => {
    const wait = opts.onOutput?.('stdout', Buffer.from('x'));
    t.ok(typeof (wait as Promise<unknown> | undefined)?.then === 'function', 'a held-back write is waited for');
    t.equal(opts.onOutput?.('stdout', Buffer.from('y')), wait, 'the next chunk of the same read shares the wait');
    t.equal(stdout.listenerCount('drain'), 1, 'with one listener');
    void Promise.resolve(wait).then(() => (drained = true));
    await tick();
    t.notOk(drained, 'until the pipe drains');
    stdout.emit('drain');
    await tick();
    t.ok(drained, 'then the output goes on');
    return { exitCode: 0, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: false };
  }, args, { stdout: () => undefined, stderr: () => undefined, terminal: { stdin: (async function* () {})(), stdout, stderr } });
  t.equal(code, 0);
  t.same(['drain', 'close'].map((e) => stdout.listenerCount(e)), [0, 0], 'no listener left behind');
});

t.test('a wait that never settles holds the output only until the kill', async (t) => {
  let restarts = 0;
  let held: unknown;
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    if (!isCommand(request)) {
      request.onOutput('stdout', Buffer.from(`${KILL_OK_MARKER}\n`));
      return { id: 'kill', finished: Promise.resolve(0), detach: () => undefined };
    }
    request.onOutput('stderr', Buffer.from([STARTED_BYTE]));
    held = request.onOutput('stdout', Buffer.from('x'));
    // As the exec's connection does: its output (and so its end) waits for the sink, or a detach.
    let detach: () => void = () => undefined;
    const detached = new Promise<null>((resolve) => (detach = () => resolve(null)));
    return { id: 'command', finished: Promise.race([Promise.resolve(held).then(() => null), detached]), detach };
  }, { restart: async () => {
      restarts += 1;
    } });
  // The kill's waits do not hold the process open (unref'd timers); a test without sockets must.
  const keepAlive = setInterval(() => undefined, 1_000);
  t.teardown(() => clearInterval(keepAlive));
  const started = Date.now();
  const r = await runner.exec('cap-x', 'yes', { timeoutMs: 50, onOutput: () => new Promise(() => undefined) });
  t.ok(r.timedOut, 'the timeout came');
  t.ok(typeof (held as Promise<unknown> | undefined)?.then === 'function', 'the sink\'s wait was passed back');
  t.equal(restarts, 0, 'the kill ended the command: no restart of the container');
  t.ok(Date.now() - started < 4_000, 'at once, not after the kill\'s wait for the output to end');
});

t.test('output after the kill that the caller cannot take is read and dropped, not piled up in its sink', async (t) => {
  // A command that outlives its kill for a while (a kill script slow to scan a busy sandbox's
  // /proc, or a process that left both the command's session and its mark, which only the
  // restart ends) goes on writing: its output was passed to a sink that had asked to wait, at the
  // connection's pace, and the CLI queued all of it (review finding).
  const CHUNK = Buffer.alloc(64 * 1024, 0x79);
  const CHUNKS = 1_000;
  let killStarted: () => void = () => undefined;
  const killing = new Promise<void>((resolve) => (killStarted = resolve));
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    if (!isCommand(request)) {
      killStarted();
      request.onOutput('stdout', Buffer.from(`${KILL_OK_MARKER}\n`));
      return { id: 'kill', finished: Promise.resolve(0), detach: () => undefined };
    }
    request.onOutput('stderr', Buffer.from([STARTED_BYTE]));
    const first = request.onOutput('stdout', CHUNK);
    // As the exec's connection does: the next read once the sink's wait settled (or the kill).
    const finished = (async () => {
      await first;
      await killing;
      for (let i = 0; i < CHUNKS; i++) await request.onOutput('stdout', CHUNK);
      return null;
    })();
    return { id: 'command', finished, detach: () => undefined };
  });
  const keepAlive = setInterval(() => undefined, 1_000);
  t.teardown(() => clearInterval(keepAlive));
  let passed = 0;
  // A reader that never drains: every write is held back.
  const r = await runner.exec('cap-x', 'yes', {
    timeoutMs: 50,
    onOutput: (_stream: 'stdout' | 'stderr', chunk: Uint8Array) => {
      passed += chunk.length;
      return new Promise(() => undefined);
    },
  });
  t.ok(r.timedOut, 'the timeout came');
  t.ok(passed <= 2 * CHUNK.length, `${(passed / 1e6).toFixed(1)} MB passed to a sink that took none of it`);
  t.ok(r.truncated, 'the result says output was dropped');
});
