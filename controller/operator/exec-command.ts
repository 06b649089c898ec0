/**
 * The command of `exec` and `run` as a terminal user meets it: its output written to the CLI's
 * stdout and stderr as it arrives (the controller's onOutput, whole: streamed output is not held,
 * so not capped; a write that fails is the reader gone, which kills the command), the CLI's
 * stdin passed on with -i, a terminal with -t (raw mode on the CLI's own terminal with -i -t,
 * restored on every way out), and a SIGINT, SIGTERM or SIGHUP to the CLI kills the command in the
 * sandbox (an abort) before the CLI exits, so that nothing is left running there. With --json the
 * result is printed once at the end, as the controller returns it.
 */
import { StringDecoder } from 'node:string_decoder';
import { constants } from 'node:os';
import type { ExecOptions, ExecResult } from '../spec/index.js';
import { usageError } from './args.js';
import { asciiJson } from './render.js';

/** The CLI's own streams, where the bytes of a command go as they are (cli.ts: process.std*). */
export interface ExecTerminal {
  readonly stdin: AsyncIterable<Uint8Array> & { readonly isTTY?: boolean; setRawMode?: (raw: boolean) => unknown; destroy?: () => unknown };
  readonly stdout: WritableEnd & { readonly isTTY?: boolean; readonly columns?: number; readonly rows?: number };
  readonly stderr: WritableEnd;
}

/**
 * Where output goes; `on('error')` where a write can fail (EPIPE, EIO: the reader went away), and
 * `once('drain')` where a write can be held back (false: a pipe whose reader is slower).
 */
interface WritableEnd {
  write(chunk: Uint8Array): unknown;
  on?(event: 'error', listener: (err: NodeJS.ErrnoException) => void): unknown;
  off?(event: 'error' | 'drain' | 'close', listener: (err?: NodeJS.ErrnoException) => void): unknown;
  once?(event: 'drain' | 'error' | 'close', listener: () => void): unknown;
}

export interface ExecCommandArgs {
  readonly json: boolean;
  readonly interactive: boolean;
  readonly tty: boolean;
  /** End what the sandbox user left running first (ExecOptions.fresh). */
  readonly fresh?: boolean;
  readonly timeoutMs: number | undefined;
  /**
   * Per stream: the deployment's outputBytes ceiling, for what the controller holds (output that
   * came before the command began); what is streamed after it is not held and passes whole.
   */
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
/** Exit code of exec when its output's reader went away, as a command killed by SIGPIPE. */
const EXIT_READER_GONE = 128 + constants.signals.SIGPIPE;
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];

/** The exec options of the command line; the terminal's size and echo with -t. */
export function execOptions(args: ExecCommandArgs, terminal: ExecTerminal | undefined, signal: AbortSignal): ExecOptions {
  if (args.interactive && terminal === undefined) throw usageError('-i needs the CLI\'s own stdin, which this caller did not give');
  const opts: ExecOptions = { signal, ...(args.timeoutMs === undefined ? {} : { timeoutMs: args.timeoutMs }) };
  if (args.interactive && terminal !== undefined) opts.stdin = terminal.stdin;
  if (args.fresh === true) opts.fresh = true;
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

/**
 * Where streamed output goes: the CLI's streams as bytes, or the io's text (UTF-8 kept whole across
 * chunks). A write held back (Node writes a pipe asynchronously, and queues what its reader has
 * not taken) is waited for before more output is read: a command writing faster than `exec NAME
 * -- cmd | reader` reads would otherwise pile all of its output up in this process.
 */
function outputWriter(io: ExecCommandIo, readerGone: () => boolean): (stream: 'stdout' | 'stderr', chunk: Uint8Array) => Promise<void> | undefined {
  const terminal = io.terminal;
  if (terminal !== undefined) {
    // One wait per stream at a time: the frames of one read of the exec's connection share it.
    const waiting: { stdout?: Promise<void> | undefined; stderr?: Promise<void> | undefined } = {};
    return (stream, chunk) => {
      const end = terminal[stream];
      if (readerGone() || end.write(chunk) !== false || end.once === undefined) return waiting[stream];
      // An error or a close is an end of the wait too (the error handler kills the command).
      waiting[stream] ??= new Promise<void>((resolve) => {
        const events = ['drain', 'error', 'close'] as const;
        const done = (): void => {
          for (const event of events) end.off?.(event, done);
          waiting[stream] = undefined;
          resolve();
        };
        for (const event of events) end.once?.(event, done);
      });
      return waiting[stream];
    };
  }
  const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  return (stream, chunk) => {
    io[stream](decoders[stream].write(Buffer.from(chunk)));
    return undefined;
  };
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
  // Any failed write (EPIPE: `exec NAME -- cmd | head`; EIO, ECONNRESET: a terminal or socket
  // gone) is the reader of the output going away: the command is killed, once, and nothing more
  // is written (the writes that follow would fail too).
  let readerGone = false;
  const onWriteError = (): void => {
    if (readerGone) return;
    readerGone = true;
    abort.abort();
  };
  const ends = io.terminal === undefined ? [] : [io.terminal.stdout, io.terminal.stderr];
  const opts = execOptions(args, io.terminal, abort.signal);
  if (!args.json) opts.onOutput = outputWriter(io, () => readerGone);
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
  return report(r, args, io, stoppedBy, readerGone);
}

function report(r: ExecResult, args: ExecCommandArgs, io: ExecCommandIo, stoppedBy: StopSignal | undefined, readerGone: boolean): number {
  if (readerGone && stoppedBy === undefined) {
    // Output was lost: never the command's status, even if it ended before the kill came.
    io.stderr(`capybara-sandbox: the output's reader went away; ${r.aborted ? 'the command was killed' : 'output was lost'}\n`);
    return EXIT_READER_GONE;
  }
  if (args.json) {
    io.stdout(`${asciiJson({ ...r }, 2)}\n`);
  } else {
    // Streamed: the result holds no output, unless the command never began.
    io.stdout(r.stdout);
    io.stderr(r.stderr);
    // After a kill, output the reader had not taken is dropped too (StreamedOutput.stop).
    const after = r.timedOut || r.aborted ? ' or after the kill while the reader had not taken what came before it' : '';
    if (r.truncated) io.stderr(`capybara-sandbox: output that came before the command began, past ${args.maxOutputBytes} bytes (per stream, the deployment's maxLimits.outputBytes)${after}, was dropped\n`);
    if (r.timedOut) io.stderr('capybara-sandbox: the command timed out and was killed\n');
    if (r.aborted) io.stderr(`capybara-sandbox: ${stoppedBy ?? 'a signal'} came; the command was killed\n`);
  }
  // Output lost is never a success (the CLI's streamed output is otherwise whole).
  if (r.truncated && !args.json && r.exitCode === 0) return EXIT_NO_CODE;
  if (r.exitCode !== null) return r.exitCode;
  if (r.timedOut) return EXIT_TIMED_OUT;
  if (r.aborted && stoppedBy !== undefined) return 128 + constants.signals[stoppedBy];
  return EXIT_NO_CODE;
}
