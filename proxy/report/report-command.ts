/**
 * `capybara-egress report LOGFILE|-`: reads the proxy's JSON log (a file, or `-` for stdin) line
 * by line and prints the allowHosts policy the run needed (allowlist-report.ts). Lines are split
 * here, not by readline, so that a line without an end is never held past the cap: its bytes are
 * dropped as they come, and it is counted as malformed. Exit 0 with the policy on stdout, notes on
 * stderr; 1 when the log cannot be read; 2 for a usage error.
 */
import { createReadStream } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { AllowlistReport, REPORT_LIMITS } from './allowlist-report.js';

export const REPORT_USAGE = 'usage: capybara-egress report LOGFILE|-   (the proxy\'s JSON log lines; - reads stdin)';

export interface ReportIo {
  readonly stdin: Readable;
  readonly stdout: Writable;
  readonly stderr: Writable;
}

/** Feeds every line of `input` to `report`, each cut at the newline, none held past the cap. */
export async function readLines(input: Readable, report: AllowlistReport, maxLineBytes = REPORT_LIMITS.maxLineBytes): Promise<void> {
  let held: Buffer[] = [];
  let heldBytes = 0;
  let overlong = false;
  const end = (): void => {
    if (overlong) report.tooLong();
    else if (heldBytes > 0) report.add(Buffer.concat(held).toString('utf8'));
    held = [];
    heldBytes = 0;
    overlong = false;
  };
  for await (const chunk of input) {
    let buffer = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    for (let nl = buffer.indexOf(0x0a); ; nl = buffer.indexOf(0x0a)) {
      const part = nl === -1 ? buffer : buffer.subarray(0, nl);
      if (!overlong && heldBytes + part.length > maxLineBytes) {
        overlong = true;
        held = [];
      }
      if (!overlong) {
        held.push(part);
        heldBytes += part.length;
      }
      if (nl === -1) break;
      end();
      buffer = buffer.subarray(nl + 1);
    }
  }
  end();
}

/** Runs the command; resolves to its exit status. */
export async function runReport(args: readonly string[], io: ReportIo): Promise<number> {
  const [file, ...rest] = args;
  if (file === undefined || rest.length > 0 || (file.startsWith('-') && file !== '-')) {
    io.stderr.write(`capybara-egress report: ${file === undefined ? 'give the log file' : `unexpected ${rest.length > 0 ? `"${rest[0] ?? ''}"` : `option ${file}`}`}\n${REPORT_USAGE}\n`);
    return 2;
  }
  const source = file === '-' ? 'stdin' : file;
  const report = new AllowlistReport();
  try {
    await readLines(file === '-' ? io.stdin : createReadStream(file), report);
  } catch (err) {
    io.stderr.write(`capybara-egress report: cannot read ${source} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})\n`);
    return 1;
  }
  io.stdout.write(report.render(source));
  const { lines, decisions, malformed, droppedHosts } = report.counts;
  if (malformed > 0) io.stderr.write(`capybara-egress report: ${malformed} of ${lines} lines in ${source} were no JSON log line of the proxy (or longer than ${REPORT_LIMITS.maxLineBytes} bytes), skipped\n`);
  if (decisions === 0) io.stderr.write(`capybara-egress report: ${source} has no decision lines: it is not the proxy's log, or nothing went through the proxy (the allowlist above is empty)\n`);
  if (droppedHosts > 0) io.stderr.write(`capybara-egress report: more than ${REPORT_LIMITS.maxHosts} hosts; ${droppedHosts} lines of further hosts were not listed\n`);
  return 0;
}
