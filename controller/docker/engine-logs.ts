/**
 * A container's log, read from the engine (`GET /containers/{name}/logs`): stdout and stderr,
 * demultiplexed, as it arrives, and with `follow` until the container stops or the reader stops
 * it. The operator CLI's `logs` reads a sandbox's egress proxy this way, from the engine itself:
 * the socket proxy admits no log route (what a container wrote is not the controller's to read).
 * Only containers created without a TTY (every container the controller makes) have the framed
 * stream StreamDemux reads; a TTY's raw stream would be refused as malformed.
 */
import type { Readable } from 'node:stream';
import { SandboxError } from '../spec/index.js';
import type { EngineCaller } from './engine-call.js';
import { StreamDemux, type FrameSink } from './stream-demux.js';

export interface LogRequest {
  /** Keep the stream open for what the container writes next (until it stops). */
  readonly follow: boolean;
  /** Only what was written after this time (milliseconds since the epoch). */
  readonly sinceMs?: number | undefined;
  readonly onOutput: FrameSink;
}

export interface LogRead {
  /** Resolves when the stream has ended (the container stopped, or `stop` was called). */
  readonly finished: Promise<void>;
  /** Ends the read; `finished` then resolves. */
  stop(): void;
}

/** The query of a log read: both streams, no timestamps of Docker's (the proxy's lines carry their own). */
export function logQuery(request: Pick<LogRequest, 'follow' | 'sinceMs'>): Record<string, string | number | boolean> {
  const since = request.sinceMs === undefined ? undefined : Math.max(0, Math.floor(request.sinceMs));
  return {
    stdout: true,
    stderr: true,
    follow: request.follow,
    // SECONDS.NANOSECONDS: Docker reads the digits after the dot as a count of nanoseconds.
    ...(since === undefined ? {} : { since: `${Math.floor(since / 1000)}.${String((since % 1000) * 1_000_000).padStart(9, '0')}` }),
  };
}

export async function readContainerLogs(engine: EngineCaller, container: string, request: LogRequest): Promise<LogRead> {
  const stream = await engine.call<Readable>(`log of container ${container}`, 'GET', `/containers/${container}/logs`, {
    query: logQuery(request), stream: true,
  });
  const demux = new StreamDemux(request.onOutput);
  const finished = new Promise<void>((resolve, reject) => {
    stream.on('data', (chunk: Buffer) => {
      try {
        // A sink that waits (logs into a slow reader) pauses the stream.
        demux.pushPaced(stream, chunk);
      } catch (err) {
        stream.destroy();
        reject(new SandboxError('engine_error', `The log of ${container} was not Docker's framed stream (a container with a TTY?).`, { cause: err }));
      }
    });
    stream.on('end', () => resolve());
    stream.on('close', () => resolve());
    stream.on('error', () => resolve());
  });
  return { finished, stop: () => stream.destroy() };
}
