/** A stream that keeps each JSON log line written to it, parsed, for a test to read. */
import { Writable } from 'node:stream';

export interface CapturedLogs<T = Record<string, unknown>> {
  /** Every line so far, in order. */
  readonly logs: T[];
  /** Where the logger writes (createLogger(level, sink)). */
  readonly sink: Writable;
}

export function captureLogs<T = Record<string, unknown>>(): CapturedLogs<T> {
  const logs: T[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') logs.push(JSON.parse(line) as T);
      done();
    },
  });
  return { logs, sink };
}
