/**
 * Where a sandbox create spends its time, read from the controller itself: the engine layer logs
 * every Docker call at debug level with its duration (engine-call.ts), so a logger handed to the
 * provider sees each step of a real create, with the concurrency the lifecycle really has. A
 * step is a call with the sandbox's name taken out ("start of container <name>-egress"); calls
 * that share a label within one create (an exec inspect polled twice) become one span from the
 * first start to the last end.
 */
import { Writable } from 'node:stream';
import pino, { type Logger } from 'pino';

interface CallRecord {
  readonly label: string;
  /** Milliseconds since the epoch. */
  readonly start: number;
  readonly end: number;
}

export interface StepSpan {
  readonly label: string;
  /** Offsets from the start of the create, in ms. */
  readonly start: number;
  readonly end: number;
  readonly calls: number;
}

/** A debug logger whose engine-call lines are kept for `take`, and everything else dropped. */
export class EngineTimeline {
  private records: CallRecord[] = [];
  readonly logger: Logger;

  constructor() {
    const sink = new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        for (const line of chunk.toString('utf8').split('\n')) this.keep(line);
        done();
      },
    });
    this.logger = pino({ level: 'debug' }, sink);
  }

  private keep(line: string): void {
    if (line === '') return;
    const entry = JSON.parse(line) as { msg?: string; call?: string; time?: number; ms?: number; level?: number };
    // What the controller warns of (a create that failed, a recovery) still reaches the terminal.
    if ((entry.level ?? 0) >= 40) process.stderr.write(`${line}\n`);
    if (entry.msg !== 'engine call' || typeof entry.call !== 'string' || typeof entry.time !== 'number' || typeof entry.ms !== 'number') return;
    this.records.push({ label: entry.call, start: entry.time - entry.ms, end: entry.time });
  }

  /**
   * The steps of the create that started at `since` (epoch ms) for sandbox `name`, ordered by
   * start; forgets every record so far.
   */
  take(since: number, name: string): StepSpan[] {
    const spans = new Map<string, { start: number; end: number; calls: number }>();
    for (const r of this.records) {
      const label = r.label.split(name).join('<name>');
      const span = spans.get(label);
      if (span === undefined) spans.set(label, { start: r.start, end: r.end, calls: 1 });
      else spans.set(label, { start: Math.min(span.start, r.start), end: Math.max(span.end, r.end), calls: span.calls + 1 });
    }
    this.records = [];
    return [...spans]
      .map(([label, s]) => ({ label, start: s.start - since, end: s.end - since, calls: s.calls }))
      .sort((a, b) => a.start - b.start);
  }

  /**
   * The duration of every call since the last `take` or `drain`, grouped by `kind` of its label
   * (undefined: left out), in ms; forgets every record so far.
   */
  drain(kind: (label: string) => string | undefined): Map<string, number[]> {
    const out = new Map<string, number[]>();
    for (const r of this.records) {
      const k = kind(r.label);
      if (k !== undefined) out.set(k, [...(out.get(k) ?? []), r.end - r.start]);
    }
    this.records = [];
    return out;
  }
}
