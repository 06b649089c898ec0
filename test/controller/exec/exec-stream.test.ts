/**
 * A command's output passed on as it arrives (ExecOptions.onOutput), its stdin as a stream, and
 * its terminal (ExecOptions.tty), through CommandRunner with an engine whose exec is a script of
 * chunks and pauses: nothing before the start byte is passed on, the cap holds what is held (and
 * nothing after the start), and the exec
 * request is the one the wrapper needs. The wrapper on a real terminal: exec-tty.test.ts.
 */
import t from 'tap';
import { CommandRunner } from '../../../controller/exec/commands.js';
import { StreamedOutput } from '../../../controller/exec/output-capture.js';
import { KILL_OK_MARKER, MAX_INLINE_PAYLOAD, STARTED_BYTE, SURVIVORS_MARKER } from '../../../controller/exec/exec-script.js';
import type { ExecRequest, ExecRun } from '../../../controller/docker/engine.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import type { ExecOptions } from '../../../controller/spec/index.js';
import { isCommand, standInRunner } from '../../support/stand-in-runner.js';

const START = String.fromCharCode(STARTED_BYTE);

/** A chunk on one stream, a pause in ms, or a look at what was passed on so far. */
type Step = readonly ['stdout' | 'stderr', string] | number | (() => void);

interface Stub {
  readonly runner: CommandRunner;
  /** Every exec request, the kill scripts' included. */
  readonly requests: ExecRequest[];
}

/** A runner whose command exec plays `steps` and exits `exitCode`; a kill ends it (exit null). */
function stub(steps: readonly Step[], exitCode: number | null): Stub {
  const requests: ExecRequest[] = [];
  let killed = false;
  const runner = standInRunner(async (_container: string, request: ExecRequest): Promise<ExecRun> => {
    requests.push(request);
    if (!isCommand(request)) {
      // A kill script or the root survivor check.
      killed = true;
      request.onOutput('stdout', Buffer.from(request.cmd[3] === SURVIVORS_MARKER ? `${SURVIVORS_MARKER} 0\n` : `${KILL_OK_MARKER}\n`));
      return { id: 'kill', finished: Promise.resolve(0), detach: () => undefined };
    }
    const finished = (async () => {
      for (const step of steps) {
        if (killed) return null;
        if (typeof step === 'number') await new Promise((resolve) => setTimeout(resolve, step));
        else if (typeof step === 'function') step();
        else request.onOutput(step[0], Buffer.from(step[1], 'utf8'));
      }
      return killed ? null : exitCode;
    })();
    return { id: 'command', finished, detach: () => undefined };
  }, { execTimeoutMs: 600_000, outputBytes: 16 * 1024 * 1024 });
  return { runner, requests };
}

/** What onOutput was given, chunk by chunk. */
function recorder(): { seen: string[]; onOutput: NonNullable<ExecOptions['onOutput']> } {
  const seen: string[] = [];
  return { seen, onOutput: (stream, chunk) => seen.push(`${stream}:${Buffer.from(chunk).toString('utf8')}`) };
}

t.test('StreamedOutput holds until the start under the cap, then passes everything on', async (t) => {
  const rows: { name: string; cap: number; before: string[]; after: string[]; want: string[]; truncated: boolean }[] = [
    { name: 'nothing before the start', cap: 10, before: [], after: ['ab', 'cd'], want: ['ab', 'cd'], truncated: false },
    { name: 'held bytes come first, at the start', cap: 10, before: ['early'], after: ['late'], want: ['early', 'late'], truncated: false },
    { name: 'exactly the cap', cap: 4, before: [], after: ['ab', 'cd'], want: ['ab', 'cd'], truncated: false },
    { name: 'past the cap after the start: all passed on, nothing cut', cap: 3, before: [], after: ['ab', 'cd', 'ef'], want: ['ab', 'cd', 'ef'], truncated: false },
    { name: 'a character across the cap after the start: whole', cap: 3, before: [], after: ['a€'], want: ['a€'], truncated: false },
    { name: 'held past the cap: the held part is cut, what follows passes', cap: 3, before: ['abcdef'], after: ['x'], want: ['abc', 'x'], truncated: true },
  ];
  for (const row of rows) {
    const got: string[] = [];
    const out = new StreamedOutput(row.cap, (chunk) => got.push(chunk.toString('utf8')));
    for (const c of row.before) out.push(Buffer.from(c));
    t.same(got, [], `${row.name}: nothing passed before the start`);
    out.release();
    for (const c of row.after) out.push(Buffer.from(c));
    t.same([got, out.truncated, out.text()], [row.want, row.truncated, ''], row.name);
  }
  const never = new StreamedOutput(100, () => t.fail('a command that never began passes nothing on'));
  never.push(Buffer.from('OCI runtime exec failed: x\r\n'));
  t.equal(never.text(), 'OCI runtime exec failed: x\r\n', 'what came is held for the failure');
});

t.test('output is passed on as it arrives, and the result holds none of it', async (t) => {
  const r = recorder();
  let seenAtPause: string[] = [];
  const { runner } = stub([['stderr', START], ['stdout', 'one\n'], () => (seenAtPause = [...r.seen]), 30, ['stdout', 'two\n'], ['stderr', 'e\n']], 3);
  const result = await runner.exec('cap-x', 'whatever', { onOutput: r.onOutput });
  t.same(seenAtPause, ['stdout:one\n'], 'the first line was out while the command still ran');
  t.same(r.seen, ['stdout:one\n', 'stdout:two\n', 'stderr:e\n']);
  t.same(result, { exitCode: 3, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: false });
});

t.test('nothing of the wrapper is passed on; stdout that came before the start byte follows it', async (t) => {
  const r = recorder();
  const { runner } = stub([['stdout', 'early\n'], ['stderr', `bash: warning: setlocale\n${START}err1\n`], ['stdout', 'late\n']], 0);
  await runner.exec('cap-x', 'x', { onOutput: r.onOutput });
  t.same(r.seen, ['stdout:early\n', 'stderr:err1\n', 'stdout:late\n']);
});

t.test('a command that never began passes nothing on and is an error', async (t) => {
  const r = recorder();
  const { runner } = stub([['stdout', 'OCI runtime exec failed: exec failed: unable to start container process: exec: "bash": not found: unknown\r\n']], 127);
  const err = await runner.exec('cap-x', 'x', { onOutput: r.onOutput }).then(() => undefined, (e: unknown) => e);
  t.ok(isSandboxError(err, 'exec_failed'), String(err));
  t.same(r.seen, []);
});

t.test('output after the start is passed on whole past the cap; only what is held is capped', async (t) => {
  const r = recorder();
  const { runner } = stub([['stderr', START], ['stdout', 'abc'], ['stdout', 'd€f'], ['stderr', 'xy']], 0);
  const result = await runner.exec('cap-x', 'x', { onOutput: r.onOutput, maxOutputBytes: 5 });
  t.same(r.seen, ['stdout:abc', 'stdout:d€f', 'stderr:xy'], 'nothing dropped: streamed output is not held');
  t.equal(result.truncated, false);
  const held = recorder();
  const early = stub([['stdout', 'abcdefgh'], ['stderr', START], ['stdout', 'ij']], 0);
  const r2 = await early.runner.exec('cap-x', 'x', { onOutput: held.onOutput, maxOutputBytes: 5 });
  t.same(held.seen, ['stdout:abcde', 'stdout:ij'], 'stdout held before the start byte is capped');
  t.equal(r2.truncated, true, 'and the result says so');
});

t.test('a sink that throws loses its chunk, not the command', async (t) => {
  const { runner } = stub([['stderr', START], ['stdout', 'a'], ['stdout', 'b']], 5);
  let calls = 0;
  const result = await runner.exec('cap-x', 'x', {
    onOutput: () => {
      calls += 1;
      throw new Error('sink broke');
    },
  });
  t.same([calls, result.exitCode], [2, 5]);
});

t.test('a timeout still kills a streamed command', async (t) => {
  const r = recorder();
  const { runner, requests } = stub([['stderr', START], ['stdout', 'a\n'], ...Array.from({ length: 100 }, () => 50), ['stdout', 'never\n']], 0);
  const result = await runner.exec('cap-x', 'x', { onOutput: r.onOutput, timeoutMs: 100 });
  t.same([result.timedOut, result.exitCode, r.seen], [true, null, ['stdout:a\n']]);
  t.ok(requests.some((q) => q.cmd[3] === 'capybara-kill'), 'the command\'s session was killed');
});

t.test('a stdin stream follows a staged command', async (t) => {
  const { runner, requests } = stub([['stderr', START]], 0);
  async function* caller(): AsyncGenerator<Uint8Array> {
    yield Buffer.from('in-1 ');
    yield Buffer.from('in-2');
  }
  const big = `: ${'x'.repeat(MAX_INLINE_PAYLOAD)}`;
  await runner.exec('cap-x', big, { stdin: caller() });
  const stdin = requests[0]?.stdin;
  t.ok(stdin !== undefined && !(stdin instanceof Uint8Array), 'a stream, not bytes');
  const chunks: Buffer[] = [];
  for await (const c of stdin as AsyncIterable<Uint8Array>) chunks.push(Buffer.from(c));
  const all = Buffer.concat(chunks).toString('utf8');
  const staged = Number((requests[0]?.cmd[5] ?? '').slice(1));
  t.match(all.slice(0, staged), /^: x+\n# capybara-payload-end default\//, 'the staged command first, with its end line');
  t.equal(all.slice(staged), 'in-1 in-2', 'then the caller\'s stdin');
});

t.test('a terminal: the wrapper is told, and the command\'s shell sets it up first', async (t) => {
  const rows: { name: string; tty: NonNullable<ExecOptions['tty']>; first: string }[] = [
    { name: 'sized, no echo', tty: { rows: 30, cols: 100 }, first: 'stty -echo rows 30 cols 100 2>/dev/null' },
    { name: 'echo, size unknown', tty: { echo: true }, first: 'stty echo 2>/dev/null' },
  ];
  for (const row of rows) {
    const { runner, requests } = stub([['stderr', START]], 0);
    await runner.exec('cap-x', 'vim', { tty: row.tty });
    const cmd = requests[0]?.cmd ?? [];
    t.equal(cmd.at(-1), 'tty', `${row.name}: the wrapper's last argument`);
    const script = Buffer.from(cmd[5] ?? '', 'base64').toString('utf8');
    t.same(script.split('\n'), [row.first, 'vim'], row.name);
  }
  const { runner, requests } = stub([['stderr', START]], 0);
  await runner.exec('cap-x', 'ls');
  t.equal(requests[0]?.cmd.length, 7, 'no terminal unless asked');
});

t.test('the new exec options are checked', async (t) => {
  const rows: { name: string; opts: unknown; path: RegExp }[] = [
    { name: 'a zero-row terminal', opts: { tty: { rows: 0 } }, path: /opts\.tty\.rows/ },
    { name: 'an unknown terminal key', opts: { tty: { colour: true } }, path: /colour/ },
    { name: 'onOutput not a function', opts: { onOutput: 'stdout' }, path: /opts\.onOutput/ },
    { name: 'stdin a number', opts: { stdin: 5 }, path: /opts\.stdin: must be bytes/ },
  ];
  for (const row of rows) {
    const { runner } = stub([], 0);
    const err = await runner.exec('cap-x', 'x', row.opts).then(() => undefined, (e: unknown) => e);
    t.ok(isSandboxError(err, 'invalid_spec'), `${row.name}: ${String(err)}`);
    t.match((err as Error).message, row.path, row.name);
  }
});
