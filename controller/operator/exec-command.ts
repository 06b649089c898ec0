/**
 * The command of `exec` and `run` as a terminal user meets it: its output written to the CLI's
 * stdout and stderr as it arrives (the controller's onOutput, under the output cap), the CLI's
 * stdin passed on with -i, a terminal with -t (raw mode on the CLI's own terminal with -i -t,
 * restored on every way out), and a SIGINT, SIGTERM or SIGHUP to the CLI kills the command in the
 * sandbox (an abort) before the CLI exits, so that nothing is left running there. With --json the
 * result is printed once at the end, as the controller returns it.
 */
import { StringDecoder } from 'node:string_decoder';
import { constants } from 'node:os';
import type { ExecOptions, ExecResult } from '../spec/index.js';
import { usageError } from './args.js';

/** The CLI's own streams, where the bytes of a command go as they are (cli.ts: process.std*). */
export interface ExecTerminal {
  readonly stdin: AsyncIterable<Uint8Array> & { readonly isTTY?: boolean; setRawMode?: (raw: boolean) => unknown; destroy?: () => unknown };
  readonly stdout: WritableEnd & { readonly isTTY?: boolean; readonly columns?: number; readonly rows?: number };
  readonly stderr: WritableEnd;
}

/** Where output goes; `on('error')` where a write can fail (EPIPE: the reader went away). */
interface WritableEnd {
  write(chunk: Uint8Array): unknown;
  on?(event: 'error', listener: (err: NodeJS.ErrnoException) => void): unknown;
  off?(event: 'error', listener: (err: NodeJS.ErrnoException) => void): unknown;
}

export interface ExecCommandArgs {
  readonly json: boolean;
  readonly interactive: boolean;
  readonly tty: boolean;
  readonly timeoutMs: number | undefined;
  /** Per stream: the deployment's outputBytes ceiling (streamed output is not held). */
  readonly maxOutputBytes: number;
}

export interface ExecCommandIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly terminal?: ExecTerminal | undefined;
}

/** Exit code of exec when the command was ended by its timeout, as timeout(1) does. */
const EXIT_TIMED_OUT = 124;
const EXIT_NO_CODE = 125;
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];

/** The exec options of the command line; the terminal's size and echo with -t. */
export function execOptions(args: ExecCommandArgs, terminal: ExecTerminal | undefined, signal: AbortSignal): ExecOptions {
  if (args.interactive && terminal === undefined) throw usageError('-i needs the CLI\'s own stdin, which this caller did not give');
  const opts: ExecOptions = { signal, ...(args.timeoutMs === undefined ? {} : { timeoutMs: args.timeoutMs }) };
  if (args.interactive && terminal !== undefined) opts.stdin = terminal.stdin;
  if (args.tty) {
    const out = terminal?.stdout;
    const sized = out?.isTTY === true && typeof out.rows === 'number' && typeof out.columns === 'number' && out.rows > 0 && out.columns > 0;
    // The terminal echoes what is typed only when a person types it (raw mode here, rawTerminal).
    opts.tty = { echo: rawTerminal(args, terminal), ...(sized ? { rows: out.rows, cols: out.columns } : {}) };
  }
  if (!args.json) opts.maxOutputBytes = args.maxOutputBytes;
  return opts;
}

/** Whether the CLI's terminal goes to raw mode: -i -t with stdin a terminal. */
function rawTerminal(args: ExecCommandArgs, terminal: ExecTerminal | undefined): boolean {
  return args.interactive && args.tty && terminal?.stdin.isTTY === true && typeof terminal.stdin.setRawMode === 'function';
}

/** Where streamed output goes: the CLI's streams as bytes, or the io's text (UTF-8 kept whole across chunks). */
function outputWriter(io: ExecCommandIo): (stream: 'stdout' | 'stderr', chunk: Uint8Array) => void {
  const terminal = io.terminal;
  if (terminal !== undefined) return (stream, chunk) => void terminal[stream].write(chunk);
  const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  return (stream, chunk) => io[stream](decoders[stream].write(Buffer.from(chunk)));
}

/**
 * Runs the command through `exec` (the provider's, bound to the sandbox) and returns the CLI's
 * exit code: the command's, 124 after its timeout, 128+N after the CLI's signal N.
 */
export async function runExecCommand(exec: (opts: ExecOptions) => Promise<ExecResult>, args: ExecCommandArgs, io: ExecCommandIo): Promise<number> {
  const abort = new AbortController();
  const raw = rawTerminal(args, io.terminal);
  const restore = (): void => {
    if (raw) io.terminal?.stdin.setRawMode?.(false);
  };
  let stoppedBy: StopSignal | undefined;
  const onSignal = (signal: StopSignal): void => {
    if (stoppedBy !== undefined) {
      // A second signal while the kill runs: stop waiting for it, as the signal's default would.
      restore();
      for (const [s, handler] of handlers) process.off(s, handler);
      process.kill(process.pid, signal);
      return;
    }
    stoppedBy = signal;
    abort.abort();
  };
  const handlers = STOP_SIGNALS.map((signal) => [signal, () => onSignal(signal)] as const);
  // The reader of the output went away (`exec NAME -- cmd | head`): the command is stopped, as on
  // a hang-up, once (the writes that follow fail too).
  const onWriteError = (err: NodeJS.ErrnoException): void => {
    if (err.code === 'EPIPE' && stoppedBy === undefined) onSignal('SIGHUP');
  };
  const ends = io.terminal === undefined ? [] : [io.terminal.stdout, io.terminal.stderr];
  const opts = execOptions(args, io.terminal, abort.signal);
  if (!args.json) opts.onOutput = outputWriter(io);
  for (const [signal, handler] of handlers) process.on(signal, handler);
  for (const end of ends) end.on?.('error', onWriteError);
  if (raw) {
    io.terminal?.stdin.setRawMode?.(true);
    // An exit that skips the finally below (process.exit elsewhere) still gives the terminal back.
    process.once('exit', restore);
  }
  let r: ExecResult;
  try {
    r = await exec(opts);
  } finally {
    if (raw) {
      restore();
      process.off('exit', restore);
    }
    for (const [signal, handler] of handlers) process.off(signal, handler);
    for (const end of ends) end.off?.('error', onWriteError);
    // The command is over: a stdin still open (a terminal, a pipe whose writer goes on) would
    // otherwise keep the CLI waiting for its next chunk.
    if (args.interactive) io.terminal?.stdin.destroy?.();
  }
  return report(r, args, io, stoppedBy);
}

function report(r: ExecResult, args: ExecCommandArgs, io: ExecCommandIo, stoppedBy: StopSignal | undefined): number {
  if (args.json) {
    io.stdout(`${JSON.stringify({ ...r }, null, 2)}\n`);
  } else {
    // Streamed: the result holds no output, unless the command never began.
    io.stdout(r.stdout);
    io.stderr(r.stderr);
    if (r.truncated) io.stderr(`capybara-sandbox: output past ${args.maxOutputBytes} bytes (per stream, the deployment's maxLimits.outputBytes) was dropped\n`);
    if (r.timedOut) io.stderr('capybara-sandbox: the command timed out and was killed\n');
    if (r.aborted) io.stderr(`capybara-sandbox: ${stoppedBy ?? 'a signal'} came; the command was killed\n`);
  }
  if (r.exitCode !== null) return r.exitCode;
  if (r.timedOut) return EXIT_TIMED_OUT;
  if (r.aborted && stoppedBy !== undefined) return 128 + constants.signals[stoppedBy];
  return EXIT_NO_CODE;
}
