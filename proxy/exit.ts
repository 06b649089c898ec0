/**
 * How the egress process ends, so that its last log lines, the ones that explain a crash, reach
 * the log. The root logger (log.ts) batches lines and hands each batch to libuv's threadpool.
 * pino writes what is still in its buffer when the process exits, but not the batch already
 * handed over, nor one waiting to retry after EAGAIN on a full stdout: `process.exit()` drops
 * that batch (up to 16 KiB of lines), and with it usually the lines just before the failure.
 * So every end with a logger first waits for the logger's own flush, which finishes that batch.
 *
 * The wait is bounded (EXIT_FLUSH_MS): a log reader that stopped reading must not keep a failed
 * process alive, where a restart policy would otherwise bring egress back. A fatal error first
 * stops serving (listeners closed, connections ended), so nothing is served while lines drain.
 */
import pino from 'pino';
import type { Logger } from './record/index.js';

const { streamSym } = pino.symbols;

/** Longest an ending process waits for its log lines. */
export const EXIT_FLUSH_MS = 3_000;

export interface ProcessEnd {
  /** From now on, an end waits for `log`'s lines, and a fatal error first calls `stopServing`. */
  useLog(log: Logger, stopServing: () => void): void;
  /** Ends the process with `code`: at once without a logger (nothing is open yet), else once the lines are written. */
  exit(code: number): void;
  /** A fatal error (an exception nothing caught): says so on stderr and in the log, stops serving, ends with 1. */
  fatal(err: unknown): void;
}

/**
 * Takes over the end of the process: uncaught exceptions, and unhandled rejections (which Node
 * raises as uncaught exceptions), become `fatal`. Call once, at the entry point.
 */
export function installProcessEnd(): ProcessEnd {
  let log: Logger | undefined;
  let stopServing: () => void = () => undefined;
  /** Set once the end has begun; a later failure can only make it worse (1), never better. */
  let code: number | undefined;
  let reported = false;

  const finish = (exitCode: number): void => {
    if (code !== undefined) {
      code = Math.max(code, exitCode);
      return;
    }
    code = exitCode;
    const logger = log;
    if (logger === undefined) {
      process.exitCode = code;
      return;
    }
    const deadline = setTimeout(() => {
      // pino's own exit hook would write what is left synchronously, and block for good on a
      // pipe nobody reads: the lines still unwritten are given up instead.
      (logger as unknown as Record<symbol, { destroy?(): void } | undefined>)[streamSym]?.destroy?.();
      process.exit(code);
    }, EXIT_FLUSH_MS);
    // The callback comes once the batch in flight is written and the buffer is below one batch;
    // pino's exit hook then writes the rest synchronously, in order.
    logger.flush(() => {
      clearTimeout(deadline);
      process.exit(code);
    });
  };

  const end: ProcessEnd = {
    useLog(logger, stop) {
      log = logger;
      stopServing = stop;
    },
    exit: finish,
    fatal(err) {
      // One report: a second failure while ending is most likely a consequence of the first (a
      // stderr that is gone fails every write, which would come back here), and only its
      // status counts.
      if (reported) {
        finish(1);
        return;
      }
      reported = true;
      const text = err instanceof Error ? (err.stack ?? err.message) : String(err);
      process.stderr.write(`capybara-egress: fatal: ${text}\n`);
      if (log === undefined) {
        // Nothing serves before the logger exists, and there is nothing to flush.
        process.exit(1);
      }
      try {
        // error(), not fatal(): pino's fatal() writes synchronously, which blocks for good on a
        // pipe nobody reads; the bounded flush writes this line too.
        log.error({ event: 'fatal', err: text }, 'fatal error; the egress proxy stops');
        stopServing();
      } catch {
        // Best effort: the exit below happens whatever failed here.
      }
      finish(1);
    },
  };
  process.on('uncaughtException', (err) => end.fatal(err));
  return end;
}

/** Until SIGTERM or SIGINT. */
export function untilStopped(log: Logger): Promise<void> {
  return new Promise((resolve) => {
    const stopping = (signal: string): void => {
      log.info({ event: 'stopping', signal }, 'egress proxy stopping');
      resolve();
    };
    process.once('SIGTERM', stopping);
    process.once('SIGINT', stopping);
  });
}
