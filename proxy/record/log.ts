/**
 * Structured logging. One root pino logger per process; one child per client connection; one
 * decision line per request and one close line per tunnel, with the field names below.
 * Request and response bodies are never logged.
 */
import { performance } from 'node:perf_hooks';
// Imported, not required on first use (common/require-cjs.ts): every proxy logs from its first
// line, and an import is bundled into the egress command (scripts/build.mjs).
import pino, { type DestinationStream, type Logger } from 'pino';

/** Field names of the decision and close lines, shared so that every line spells them alike. */
export const F = {
  event: 'event',
  decision: 'decision',
  reason: 'reason',
  detail: 'detail',
  conn: 'conn',
  client: 'client',
  /** The sandbox a shared proxy's connection or query belongs to (its registration's name). */
  sandbox: 'sandbox',
  method: 'method',
  host: 'host',
  port: 'port',
  rule: 'rule',
  addresses: 'addresses',
  pinnedBy: 'pinnedBy',
  dialed: 'dialed',
  upstream: 'upstream',
  status: 'status',
  completed: 'completed',
  decideMs: 'decideMs',
  connectMs: 'connectMs',
  durationMs: 'durationMs',
  bytesUp: 'bytesUp',
  bytesDown: 'bytesDown',
  closedBy: 'closedBy',
  sni: 'sni',
  tunnel: 'tunnel',
  error: 'error',
  requests: 'requests',
  /** `transparent` on the lines of requests that came in on the transparent listeners. */
  via: 'via',
  /** The type a DNS query asked for. */
  qtype: 'qtype',
  lines: 'lines',
  /** Report mode: the reason enforce mode would have refused an allowed request with. */
  wouldDeny: 'would_deny',
  /** The secrets put into a request, or whose placeholders got it refused: `NAME sha256:...`, never a value or placeholder. */
  secrets: 'secrets',
} as const;

export type { Logger };

/** Longest a log line waits in the batch buffer. */
const FLUSH_MS = 250;

/**
 * A batch of lines written at once, and the most one write takes. SonicBoom's text mode measured
 * the UTF-8 length of the whole pending batch on every line (a copy of it each time, as a joined
 * string), and each 4 KiB batch was a hop to a libuv thread and back: together about 3.7 µs of CPU
 * per line with the proxy on one CPU. Its buffer mode keeps each line's bytes and joins a batch
 * once, and a 32 KiB batch takes a hop per 80 lines or so: 1.4 µs. A decision line is written for
 * every request, so this is part of every request's cost.
 */
const BATCH_BYTES = 32 * 1024;
const MAX_WRITE_BYTES = 64 * 1024;

/**
 * Most bytes of log lines held for a stdout that does not take them (a stalled pipe, a log
 * collector gone slow): past it lines are dropped and counted, never held without limit, and a
 * `log_lines_dropped` line says how many once stdout takes lines again.
 */
export const LOG_QUEUE_BYTES = 4 * 1024 * 1024;

/**
 * pino's ISO timestamp, formatted once per millisecond instead of once per line: under load many
 * lines share a millisecond, and `toISOString` was a measurable share of a request's cost.
 */
function isoTimeCached(): () => string {
  let at = 0;
  let text = '';
  return () => {
    const now = Date.now();
    if (now !== at) {
      at = now;
      text = `,"time":"${new Date(now).toISOString()}"`;
    }
    return text;
  };
}

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = { level, base: { service: 'capybara-egress' }, timestamp: isoTimeCached() };
  if (destination) return pino(options, destination);
  // Lines are batched into writes of BATCH_BYTES (one write per line costs more than deciding the
  // request), and flushed FLUSH_MS after the first line of a batch, so a quiet proxy's lines are
  // not held back. Only then: a flush on a timer of its own (pino's, through logger.flush) cost
  // an idle proxy two threadpool calls four times a second, an empty write and an fsync, about
  // half of its idle CPU. The CLI flushes on exit too.
  const stream = pino.destination({ dest: 1, sync: false, contentMode: 'buffer', minLength: BATCH_BYTES, maxWrite: MAX_WRITE_BYTES, maxLength: LOG_QUEUE_BYTES });
  const logger = pino(options, stream);
  const dropped = countDropped(stream);
  let armed = false;
  // pino writes text; the buffer mode takes bytes.
  const write = stream.write.bind(stream) as unknown as (data: Buffer) => boolean;
  stream.write = (data: string): boolean => {
    if (!armed) {
      armed = true;
      setTimeout(() => {
        armed = false;
        stream.flush();
        dropped.report(logger);
      }, FLUSH_MS).unref();
    }
    return write(Buffer.from(data));
  };
  return logger;
}

/**
 * Counts the lines a destination drops (SonicBoom's `drop`: its queue was full), and writes their
 * count once it takes a line again; a count whose own line was dropped is kept for the next try.
 */
export function countDropped(stream: { on(event: 'drop', listener: (data: string | Buffer) => void): unknown }): { report(logger: Logger): void; readonly pending: number } {
  let lines = 0;
  let bytes = 0;
  stream.on('drop', (data: string | Buffer) => {
    for (let at = data.indexOf('\n'); at !== -1; at = data.indexOf('\n', at + 1)) lines += 1;
    bytes += Buffer.byteLength(data);
  });
  return {
    report(logger) {
      if (lines === 0) return;
      const count = { lines, bytes };
      lines = 0;
      bytes = 0;
      logger.warn({ [F.event]: 'log_lines_dropped', [F.lines]: count.lines, bytes: count.bytes }, 'log lines dropped: stdout did not take them in time');
      // The report line itself was dropped (stdout is still stalled; the drop is synchronous):
      // the count waits for the next try, and that line is not counted.
      if (lines > 0) {
        lines = count.lines;
        bytes = count.bytes;
      }
    },
    get pending() {
      return lines;
    },
  };
}

/** A value of a decision or close line: flat, so one native JSON.stringify serializes the line. */
export type LineValue = string | number | boolean | undefined | readonly string[];

const { streamSym, chindingsSym, timeSym } = pino.symbols;

/** The levels a line of flat fields is written at: a decision's level follows its outcome. */
export type LineLevel = 'info' | 'warn';

/**
 * Writes one line of flat fields through `logger` exactly as pino would (its level check,
 * timestamp, bindings and destination), but serializes the fields with one native
 * `JSON.stringify` instead of pino's field-by-field serializer: the decision and close lines are
 * written for every request, and pino's serializer was the larger part of their cost.
 */
export function logLine(logger: Logger, fields: Readonly<Record<string, LineValue>>, level: LineLevel = 'info'): void {
  if (!logger.isLevelEnabled(level)) return;
  const internals = logger as unknown as Record<symbol, unknown>;
  const time = (internals[timeSym] as () => string)();
  const bindings = internals[chindingsSym] as string;
  // `fields` always holds `event`, so the serialized object is never empty.
  const line = `{"level":${pino.levels.values[level]}${time}${bindings},${JSON.stringify(fields).slice(1)}\n`;
  (internals[streamSym] as { write(text: string): unknown }).write(line);
}

/** Milliseconds since a performance.now() reading, to the microsecond, for timing fields. */
export function ms(since: number): number {
  return Math.round((performance.now() - since) * 1000) / 1000;
}

/**
 * Bytes from a peer (a TLS server name, say) as log-safe text: printable ASCII as is, everything
 * else as `\xNN`, at most 255 bytes. JSON escaping alone would let U+0085 or U+2028 through, which
 * some log pipelines read as line breaks.
 */
export function printable(bytes: Buffer): string {
  let out = '';
  const n = Math.min(bytes.length, 255);
  for (let i = 0; i < n; i++) {
    const c = bytes[i]!;
    out += c > 0x20 && c < 0x7f && c !== 0x5c ? String.fromCharCode(c) : `\\x${c.toString(16).padStart(2, '0')}`;
  }
  return bytes.length > n ? `${out}...` : out;
}
