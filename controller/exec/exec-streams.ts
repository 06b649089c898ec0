/**
 * A command's streams between the caller and the exec: the caller's stdin as the engine takes it
 * (bytes, or a stream of chunks, behind a staged command), and where each output stream goes
 * (kept for the result, or passed on to the caller's onOutput as it arrives).
 */
import type { OutputSink } from '../spec/index.js';
import { sinkWait } from '../docker/index.js';
import { OutputCapture, StreamedOutput } from './output-capture.js';

/** The caller's stdin for the engine: a string as UTF-8 bytes; bytes and streams as they are. */
export function callerStdin(stdin: Uint8Array | string | AsyncIterable<Uint8Array> | undefined): Uint8Array | AsyncIterable<Uint8Array> | undefined {
  return typeof stdin === 'string' ? Buffer.from(stdin, 'utf8') : stdin;
}

/**
 * The exec's stdin: the staged payload (exec-script.ts stagedPayload), if any, then the caller's
 * stdin. A stream of the caller's is not touched until `started` says the command began: an
 * attempt that never began (the sandbox was full, the wrapper failed) has read nothing of it, so
 * a retry gets all of it (a Node Readable is destroyed when an iteration of it stops early).
 * `started` must settle false once the attempt is over without a start. Bytes are passed as
 * they are: they can be sent again.
 */
export function execStdin(
  staged: Buffer | undefined,
  caller: Uint8Array | AsyncIterable<Uint8Array> | undefined,
  started: Promise<boolean>,
): Uint8Array | AsyncIterable<Uint8Array> | undefined {
  if (caller === undefined || caller instanceof Uint8Array) {
    if (staged === undefined) return caller;
    return caller === undefined ? staged : Buffer.concat([staged, caller]);
  }
  return (async function* () {
    if (staged !== undefined) yield staged;
    if (!(await started)) return;
    yield* caller;
  })();
}

/**
 * Where one output stream of a command goes: kept for the result, or passed on to the caller's
 * onOutput as it arrives (held until the command began). A sink that throws loses that chunk
 * only: the command and its result are the controller's, not the sink's. A sink's promise is
 * passed back (a wait for the exec's connection, engine-exec.ts), whatever it settles to.
 */
export function outputStream(stream: 'stdout' | 'stderr', maxBytes: number, sink: OutputSink | undefined): OutputCapture | StreamedOutput {
  if (sink === undefined) return new OutputCapture(maxBytes);
  return new StreamedOutput(maxBytes, (chunk) => {
    try {
      return sinkWait(sink(stream, chunk))?.catch(() => undefined);
    } catch {
      // See above.
      return undefined;
    }
  });
}
