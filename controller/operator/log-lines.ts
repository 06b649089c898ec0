/**
 * Splits a log stream into lines, holding at most `maxBytes` of one line: a longer line is
 * dropped whole (its bytes as they come, never gathered) and counted, so a log line of any length
 * costs the reader no more than the cap. A line the stream ends without a newline is a line too.
 */

/** Longest log line kept: a decision line is a few hundred bytes; Docker cuts its entries at 16 KiB. */
export const MAX_LOG_LINE_BYTES = 16 * 1024;

export class LineSplitter {
  private parts: Buffer[] = [];
  private held = 0;
  private overlong = false;

  constructor(
    private readonly onLine: (line: string) => void,
    private readonly onOverlong: () => void,
    private readonly maxBytes = MAX_LOG_LINE_BYTES,
  ) {}

  push(chunk: Buffer): void {
    let start = 0;
    for (let nl = chunk.indexOf(0x0a); nl !== -1; nl = chunk.indexOf(0x0a, start)) {
      this.take(chunk.subarray(start, nl));
      this.endLine();
      start = nl + 1;
    }
    this.take(chunk.subarray(start));
  }

  /** The stream ended: what is held is its last line. */
  flush(): void {
    if (this.overlong || this.held > 0) this.endLine();
  }

  private take(part: Buffer): void {
    if (this.overlong || part.length === 0) return;
    if (this.held + part.length > this.maxBytes) {
      this.overlong = true;
      this.parts = [];
      this.held = 0;
      return;
    }
    this.parts.push(part);
    this.held += part.length;
  }

  private endLine(): void {
    if (this.overlong) {
      this.overlong = false;
      this.onOverlong();
      return;
    }
    const line = Buffer.concat(this.parts, this.held).toString('utf8');
    this.parts = [];
    this.held = 0;
    if (line.trim() !== '') this.onLine(line);
  }
}
