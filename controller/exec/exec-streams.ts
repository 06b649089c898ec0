/**
 * A command's streams between the caller and the exec: the caller's stdin as the engine takes it
 * (bytes, or a stream of chunks, behind a staged command), and where each output stream goes
 * (kept for the result, or passed on to the caller's onOutput as it arrives).
 */
import type { OutputSink } from '../spec/index.js';
import { OutputCapture, StreamedOutput } from './output-capture.js';

/** The caller's stdin for the engine: a string as UTF-8 bytes; bytes and streams as they are. */
export function callerStdin(stdin: Uint8Array | string | AsyncIterable<Uint8Array> | undefined): Uint8Array | AsyncIterable<Uint8Array> | undefined {
  return typeof stdin === 'string' ? Buffer.from(stdin, 'utf8') : stdin;
}

/** The staged payload (exec-script.ts stagedPayload) ahead of the caller's stdin, bytes or a stream. */
export function afterStaged(staged: Buffer, caller: Uint8Array | AsyncIterable<Uint8Array> | undefined): Uint8Array | AsyncIterable<Uint8Array> {
  if (caller === undefined) return staged;
  if (caller instanceof Uint8Array) return Buffer.concat([staged, caller]);
  return (async function* () {
    yield staged;
    yield* caller;
  })();
}

/**
 * Where one output stream of a command goes: kept for the result, or passed on to the caller's
 * onOutput as it arrives (held until the command began). A sink that throws loses that chunk
 * only: the command and its result are the controller's, not the sink's.
 */
export function outputStream(stream: 'stdout' | 'stderr', maxBytes: number, sink: OutputSink | undefined): OutputCapture | StreamedOutput {
  if (sink === undefined) return new OutputCapture(maxBytes);
  return new StreamedOutput(maxBytes, (chunk) => {
    try {
      sink(stream, chunk);
    } catch {
      // See above.
    }
  });
}
