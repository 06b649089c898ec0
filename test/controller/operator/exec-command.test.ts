/**
 * exec and run's command on the CLI side (exec-command.ts), with a stand-in for the provider's
 * exec: the options the command line makes (terminal size and echo, stdin, the cap), raw mode on
 * and off on every way out, the output written as bytes or as whole characters, and the exit
 * codes and notes of a timeout, a cap and a signal. The real engine: test/controller/exec/docker-exec-stream.test.ts.
 */
import t from 'tap';
import { execOptions, runExecCommand, type ExecCommandArgs, type ExecTerminal } from '../../../controller/operator/exec-command.js';
import { runOperator } from '../../../controller/operator/run.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import type { ExecOptions, ExecResult } from '../../../controller/spec/index.js';

const PLAIN: ExecCommandArgs = { json: false, interactive: false, tty: false, timeoutMs: undefined, maxOutputBytes: 1000 };
const OK: ExecResult = { exitCode: 0, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: false };

interface FakeTerminal extends ExecTerminal {
  readonly written: { stdout: Buffer[]; stderr: Buffer[] };
  readonly rawModes: boolean[];
  /** Calls of stdin.destroy. */
  readonly destroyed: number[];
}

function terminal(opts: { stdinTty?: boolean; stdoutTty?: boolean } = {}): FakeTerminal {
  const written = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const rawModes: boolean[] = [];
  const destroyed: number[] = [];
  async function* input(): AsyncGenerator<Uint8Array> {
    yield Buffer.from('typed');
  }
  const stdin = Object.assign(input(), {
    isTTY: opts.stdinTty === true,
    setRawMode: (raw: boolean) => rawModes.push(raw),
    destroy: () => destroyed.push(1),
  });
  return {
    written,
    rawModes,
    destroyed,
    stdin,
    stdout: { isTTY: opts.stdoutTty === true, rows: 30, columns: 100, write: (c: Uint8Array) => written.stdout.push(Buffer.from(c)) },
    stderr: { write: (c: Uint8Array) => written.stderr.push(Buffer.from(c)) },
  };
}

function texts(): { io: { stdout: (s: string) => void; stderr: (s: string) => void }; out: { stdout: string; stderr: string } } {
  const out = { stdout: '', stderr: '' };
  return { out, io: { stdout: (s) => (out.stdout += s), stderr: (s) => (out.stderr += s) } };
}

t.test('the exec options of a command line', async (t) => {
  const signal = new AbortController().signal;
  const rows: { name: string; args: Partial<ExecCommandArgs>; term?: FakeTerminal; want: Record<string, unknown>; stdin: boolean }[] = [
    { name: 'plain', args: {}, term: terminal(), want: { maxOutputBytes: 1000 }, stdin: false },
    { name: '--json keeps the default cap', args: { json: true, timeoutMs: 5000 }, term: terminal(), want: { timeoutMs: 5000 }, stdin: false },
    { name: '-t on a terminal: its size, no echo', args: { tty: true }, term: terminal({ stdoutTty: true }), want: { maxOutputBytes: 1000, tty: { echo: false, rows: 30, cols: 100 } }, stdin: false },
    { name: '-t with stdout not a terminal: no size', args: { tty: true }, term: terminal(), want: { maxOutputBytes: 1000, tty: { echo: false } }, stdin: false },
    { name: '-i -t typed at a terminal: echo', args: { tty: true, interactive: true }, term: terminal({ stdinTty: true, stdoutTty: true }), want: { maxOutputBytes: 1000, tty: { echo: true, rows: 30, cols: 100 } }, stdin: true },
    { name: '-i -t piped: no echo', args: { tty: true, interactive: true }, term: terminal(), want: { maxOutputBytes: 1000, tty: { echo: false } }, stdin: true },
    { name: '-i alone', args: { interactive: true }, term: terminal({ stdinTty: true }), want: { maxOutputBytes: 1000 }, stdin: true },
    { name: '--fresh', args: { fresh: true }, term: terminal(), want: { maxOutputBytes: 1000, fresh: true }, stdin: false },
  ];
  for (const row of rows) {
    const { stdin, signal: s, ...rest } = execOptions({ ...PLAIN, ...row.args }, row.term, signal);
    t.same(rest, row.want, row.name);
    t.equal(s, signal, `${row.name}: the signal`);
    t.equal(stdin === row.term?.stdin, row.stdin, `${row.name}: stdin`);
  }
  const err = (() => {
    try {
      execOptions({ ...PLAIN, interactive: true }, undefined, signal);
    } catch (e) {
      return e;
    }
  })();
  t.ok(isSandboxError(err, 'invalid_config'), '-i without the CLI\'s stdin is a usage error');
});

t.test('raw mode with -i -t at a terminal, restored on every way out', async (t) => {
  const term = terminal({ stdinTty: true, stdoutTty: true });
  let during: boolean[] = [];
  const code = await runExecCommand(async () => {
    during = [...term.rawModes];
    return { ...OK, exitCode: 4 };
  }, { ...PLAIN, interactive: true, tty: true }, { ...texts().io, terminal: term });
  t.same([code, during, term.rawModes], [4, [true], [true, false]]);
  t.same(term.destroyed, [1], 'the CLI\'s stdin is closed once the command is over (an open one would keep the CLI waiting)');
  const failing = terminal({ stdinTty: true });
  await t.rejects(runExecCommand(async () => {
    throw new Error('engine gone');
  }, { ...PLAIN, interactive: true, tty: true }, { ...texts().io, terminal: failing }), /engine gone/);
  t.same(failing.rawModes, [true, false], 'restored after a failure too');
  const piped = terminal();
  await runExecCommand(async () => OK, { ...PLAIN, interactive: true, tty: true }, { ...texts().io, terminal: piped });
  t.same(piped.rawModes, [], 'stdin not a terminal: left alone');
  const noInput = terminal({ stdinTty: true });
  await runExecCommand(async () => OK, { ...PLAIN, tty: true }, { ...texts().io, terminal: noInput });
  t.same(noInput.rawModes, [], 'without -i Ctrl-C stays the CLI\'s');
  t.same(noInput.destroyed, [], 'and its stdin is left alone');
});

t.test('streamed output goes out as bytes, or as whole characters', async (t) => {
  const euro = Buffer.from('€');
  const play = async (opts: ExecOptions): Promise<ExecResult> => {
    opts.onOutput?.('stdout', euro.subarray(0, 1));
    opts.onOutput?.('stdout', euro.subarray(1));
    opts.onOutput?.('stderr', Buffer.from([0xff]));
    return OK;
  };
  const term = terminal();
  await runExecCommand(play, PLAIN, { ...texts().io, terminal: term });
  t.same([Buffer.concat(term.written.stdout), Buffer.concat(term.written.stderr)], [euro, Buffer.from([0xff])], 'the bytes as they came');
  const { io, out } = texts();
  await runExecCommand(play, PLAIN, io);
  t.equal(out.stdout, '€', 'a character split across chunks is written whole');
  const json = texts();
  await runExecCommand(async (opts) => {
    t.equal(opts.onOutput, undefined, '--json: nothing streamed');
    return { ...OK, stdout: 'x' };
  }, { ...PLAIN, json: true }, json.io);
  t.equal(JSON.parse(json.out.stdout).stdout, 'x');
  // A command's output is the sandbox's: with --json a terminal must not act on any of it.
  const raw = 'a\u009b31mb\u2028c\u007fd\u001b[2Je€\ud800';
  const escaped = texts();
  await runExecCommand(async () => ({ ...OK, stdout: raw, stderr: raw }), { ...PLAIN, json: true }, escaped.io);
  t.match(escaped.out.stdout, /^[\x20-\x7e\n]*$/, '--json: printable ASCII only');
  t.same([JSON.parse(escaped.out.stdout).stdout, JSON.parse(escaped.out.stdout).stderr], [raw, raw], '--json: the same output, escaped');
});

t.test('exit codes and notes', async (t) => {
  const rows: { name: string; result: Partial<ExecResult>; code: number; note: RegExp | undefined }[] = [
    { name: 'the command\'s own', result: { exitCode: 7 }, code: 7, note: undefined },
    { name: 'a timeout', result: { exitCode: null, timedOut: true }, code: 124, note: /the command timed out and was killed/ },
    { name: 'the cap (output held before the start)', result: { truncated: true }, code: 125, note: /output that came before the command began, past 1000 bytes \(per stream, the deployment's maxLimits\.outputBytes\), was dropped/ },
    { name: 'the cap, and the command failed', result: { exitCode: 3, truncated: true }, code: 3, note: /was dropped/ },
    { name: 'no code', result: { exitCode: null }, code: 125, note: undefined },
  ];
  for (const row of rows) {
    const { io, out } = texts();
    const code = await runExecCommand(async () => ({ ...OK, ...row.result }), PLAIN, io);
    t.equal(code, row.code, row.name);
    if (row.note === undefined) t.equal(out.stderr, '', `${row.name}: no note`);
    else t.match(out.stderr, row.note, row.name);
  }
});

t.test('a SIGINT or SIGTERM to the CLI kills the command, then exits 128+N', async (t) => {
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    const { io, out } = texts();
    const before = process.listenerCount(signal);
    const r = runExecCommand((opts) => new Promise((resolve) => {
      opts.signal?.addEventListener('abort', () => resolve({ ...OK, exitCode: null, aborted: true }));
      setImmediate(() => process.emit(signal, signal));
    }), PLAIN, io);
    t.equal(await r, code, signal);
    t.match(out.stderr, new RegExp(`${signal} came; the command was killed`));
    t.equal(process.listenerCount(signal), before, `${signal}: its handler is gone afterwards`);
  }
});

/** A terminal whose stdout and stderr emit 'error' on demand, as a Node stream does after a failed write. */
function failing(): FakeTerminal & { fail: (stream: 'stdout' | 'stderr', code: string) => void } {
  const base = terminal();
  const listeners = { stdout: new Set<(err: NodeJS.ErrnoException) => void>(), stderr: new Set<(err: NodeJS.ErrnoException) => void>() };
  const end = (name: 'stdout' | 'stderr') => ({
    ...base[name],
    on: (_e: 'error', l: (err: NodeJS.ErrnoException) => void) => listeners[name].add(l),
    off: (_e: 'error', l: (err: NodeJS.ErrnoException) => void) => listeners[name].delete(l),
  });
  const fail = (name: 'stdout' | 'stderr', code: string): void => {
    for (const l of listeners[name]) l(Object.assign(new Error(code), { code }));
  };
  return { ...base, stdout: end('stdout'), stderr: end('stderr'), fail };
}

t.test('any write error is the reader gone: one abort, no more writes, exit 141', async (t) => {
  for (const errors of [['EPIPE'], ['EIO'], ['ECONNRESET'], ['EIO', 'EPIPE', 'ECONNRESET']]) {
    const term = failing();
    const { io, out } = texts();
    let aborts = 0;
    const code = await runExecCommand((opts) => new Promise((resolve) => {
      opts.signal?.addEventListener('abort', () => {
        aborts += 1;
        // Output still arriving while the kill runs is not written.
        opts.onOutput?.('stdout', Buffer.from('late'));
        setImmediate(() => resolve({ ...OK, exitCode: null, aborted: true }));
      });
      opts.onOutput?.('stdout', Buffer.from('first'));
      for (const [i, e] of errors.entries()) term.fail(i % 2 === 0 ? 'stdout' : 'stderr', e);
      opts.onOutput?.('stderr', Buffer.from('after'));
    }), PLAIN, { ...io, terminal: term });
    const name = errors.join('+');
    t.equal(code, 141, `${name}: exit 141, as SIGPIPE`);
    t.equal(aborts, 1, `${name}: aborted once`);
    t.same([Buffer.concat(term.written.stdout).toString(), Buffer.concat(term.written.stderr).toString()], ['first', ''], `${name}: nothing written after the error`);
    t.match(out.stderr, /the output's reader went away; the command was killed/, name);
    t.notMatch(out.stderr, /SIGHUP/, `${name}: not called a hang-up`);
  }
});

t.test('a write error after the command ended on its own is still not its status', async (t) => {
  const term = failing();
  const { io, out } = texts();
  const code = await runExecCommand(async (opts) => {
    opts.onOutput?.('stdout', Buffer.from('x'));
    term.fail('stdout', 'EPIPE');
    return OK;
  }, PLAIN, { ...io, terminal: term });
  t.equal(code, 141);
  t.match(out.stderr, /the output's reader went away; output was lost/);
});

t.test('a signal before the reader went away is reported as the signal', async (t) => {
  const term = failing();
  const { io, out } = texts();
  const code = await runExecCommand((opts) => new Promise((resolve) => {
    opts.signal?.addEventListener('abort', () => {
      term.fail('stdout', 'EPIPE');
      setImmediate(() => resolve({ ...OK, exitCode: null, aborted: true }));
    });
    setImmediate(() => process.emit('SIGTERM', 'SIGTERM'));
  }), PLAIN, { ...io, terminal: term });
  t.equal(code, 143);
  t.match(out.stderr, /SIGTERM came/);
});

t.test('an error line for a person shows no terminal control a message quotes', async (t) => {
  let stderr = '';
  // A name the CLI quotes back: JSON.stringify lets U+009B (CSI) stand raw.
  const code = await runOperator(['inspect', 'cap-\u009b2J\u2028x'], { stdout: () => undefined, stderr: (s) => (stderr += s) });
  t.equal(code, 2);
  t.match(stderr, /^capybara-sandbox: invalid_config: Sandbox name /);
  t.match(stderr, /\\u009b2J\\u2028x/, 'shown as escapes');
  t.notMatch(stderr, /[\u0080-\u009f\u2028\u2029]/, 'none raw');
});
