/**
 * Exec streaming: creates and starts an exec, delivers its output as it arrives (demultiplexed),
 * streams stdin over the hijacked connection (never in a request body) and reads the exit code.
 */
import type { Duplex } from 'node:stream';
import { SandboxError } from '../spec/index.js';
import type { EngineCaller } from './engine-call.js';
import { StreamDemux, type FrameSink } from './stream-demux.js';

export interface ExecRequest {
  readonly cmd: readonly string[];
  readonly user: string;
  /** `NAME=value` entries added to the container's environment for this exec only. */
  readonly env?: readonly string[] | undefined;
  /** Bytes, or a stream of chunks written as they come; either ends with a half-close. */
  readonly stdin?: Uint8Array | AsyncIterable<Uint8Array> | undefined;
  /** May return a promise: the connection is not read until it settles (FrameSink). */
  readonly onOutput: FrameSink;
}

export interface ExecRun {
  readonly id: string;
  /**
   * Resolves once the output stream has ended and the engine says the command no longer runs, with
   * its exit code (null if unknown, or once detached).
   */
  readonly finished: Promise<number | null>;
  /** Drops the connection; the process keeps running (kill it separately). */
  detach(): void;
}

/**
 * The exit code of `run`, or `late` once `ms` passed first: then the connection is dropped (the
 * process may run on). For a helper exec that a process sharing its user could stop or hold open,
 * so that nothing in the container decides how long the controller waits.
 */
export async function finishedWithin(run: ExecRun, ms: number): Promise<number | null | 'late'> {
  let late: NodeJS.Timeout | undefined;
  return Promise.race([
    run.finished,
    new Promise<'late'>((resolve) => {
      late = setTimeout(() => {
        run.detach();
        resolve('late');
      }, ms);
    }),
  ]).finally(() => clearTimeout(late));
}

/**
 * The exec create body: the command, its user, its added environment and which streams are
 * attached (no Privileged).
 */
export function execCreateBody(request: Pick<ExecRequest, 'cmd' | 'user' | 'env' | 'stdin'>): Record<string, unknown> {
  return {
    AttachStdin: request.stdin !== undefined, AttachStdout: true, AttachStderr: true, Tty: false, User: request.user, Cmd: request.cmd,
    ...(request.env === undefined ? {} : { Env: request.env }),
  };
}

/** The exec start body: attached, no TTY (the output is Docker's multiplexed stream). */
export const EXEC_START_BODY = { Detach: false, Tty: false } as const;

/**
 * Creates and starts an exec. Output is delivered as it arrives; stdin, if any, is streamed
 * over the hijacked connection (never in a request body) and then half-closed.
 */
export async function startExec(engine: EngineCaller, container: string, request: ExecRequest): Promise<ExecRun> {
  const withStdin = request.stdin !== undefined;
  const created = await engine.call<{ Id: string }>(`exec in container ${container}`, 'POST', `/containers/${container}/exec`, {
    body: execCreateBody(request),
  });
  const id = created.Id;
  if (!/^[0-9a-f]{64}$/.test(id)) throw new SandboxError('engine_error', `Docker returned an unexpected exec id for ${container}.`);
  const stream = await engine.call<Duplex>(`start of exec in ${container}`, 'POST', `/exec/${id}/start`, {
    body: EXEC_START_BODY, hijack: withStdin, stream: true,
  });
  const demux = new StreamDemux(request.onOutput);
  const ended = new Promise<void>((resolve, reject) => {
    stream.on('data', (chunk: Buffer) => {
      try {
        // A sink that waits (a slow reader of streamed output) holds the connection, and through
        // it the command's pipe: nothing a command writes piles up in this process or the sink's.
        demux.pushPaced(stream, chunk);
      } catch (err) {
        stream.destroy();
        reject(new SandboxError('engine_error', `Exec output from ${container} was malformed.`, { cause: err }));
      }
    });
    stream.on('end', () => resolve());
    stream.on('close', () => resolve());
    stream.on('error', () => resolve());
  });
  if (request.stdin instanceof Uint8Array) void feedStdin(stream, request.stdin);
  else if (request.stdin !== undefined) void pipeStdin(stream, request.stdin, ended);
  let detached = false;
  const finished = ended.then(() => exitCode(engine, id, () => detached));
  return {
    id,
    finished,
    detach: () => {
      detached = true;
      stream.destroy();
    },
  };
}

async function feedStdin(stream: Duplex, data: Uint8Array): Promise<void> {
  const CHUNK = 64 * 1024;
  try {
    for (let offset = 0; offset < data.length; offset += CHUNK) {
      if (stream.destroyed) return;
      if (!stream.write(data.subarray(offset, offset + CHUNK))) await drained(stream);
    }
    stream.end();
  } catch {
    // The command stopped reading (or the connection was dropped); its exit code says why.
  }
}

/**
 * Writes a stream of chunks to the exec's stdin as they come, waiting for the connection to take
 * each (so a fast source is held to what the command reads), then half-closes it; a source that
 * fails is an end too. Stops at once when the output ends: a read still pending on a source that
 * never ends (a terminal) is the caller's to close (the CLI closes its stdin).
 */
async function pipeStdin(stream: Duplex, source: AsyncIterable<Uint8Array>, ended: Promise<void>): Promise<void> {
  const it = source[Symbol.asyncIterator]();
  const done = ended.then(() => 'ended' as const, () => 'ended' as const);
  try {
    for (;;) {
      const pending = it.next();
      // A read still pending when the output ends may fail once the source is closed: not ours.
      pending.catch(() => undefined);
      const next = await Promise.race([pending, done]);
      if (next === 'ended' || stream.destroyed) return;
      if (next.done === true) break;
      if (!stream.write(next.value)) await drained(stream);
    }
  } catch {
    // The source failed (its end, as far as the command can tell) or the connection dropped.
  } finally {
    void Promise.resolve(it.return?.()).catch(() => undefined);
  }
  if (!stream.destroyed) stream.end();
}

/** Between the engine's answers that a command whose output ended still runs, once the first few came. */
const STILL_RUNNING_POLL_MS = 1_000;

/**
 * The exit code of an exec whose output ended. The stream usually ends a moment before the engine
 * says the command ended, so the first answers are asked for quickly. It can also end while the
 * command runs on: a connection cut on the way (the socket proxy ends one idle for an hour, a
 * command that is silent that long), whose output after that is lost. Then the engine is asked
 * again every second until the command ends (its caller's timeout still kills it), the exec or its
 * container is gone, or the caller detached: never a result while the command still runs.
 */
async function exitCode(engine: EngineCaller, id: string, detached: () => boolean): Promise<number | null> {
  for (let attempt = 0; !detached(); attempt += 1) {
    const data = await engine.optional(engine.call<{ Running?: boolean; ExitCode?: number | null }>('exec inspect', 'GET', `/exec/${id}/json`));
    if (data === undefined) return null;
    if (data.Running !== true) return typeof data.ExitCode === 'number' ? data.ExitCode : null;
    await new Promise((r) => setTimeout(r, attempt < 20 ? 25 * (attempt + 1) : STILL_RUNNING_POLL_MS));
  }
  return null;
}

/** Resolves on 'drain' or 'close', removing both listeners either way. */
function drained(stream: Duplex): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}
