/**
 * Collects one output stream of a command up to a byte cap. Bytes past the cap are read and
 * dropped (so the command never blocks on a full pipe); the kept bytes are cut back to a whole
 * UTF-8 character so the text never ends in a broken sequence. The kept bytes are copied into one
 * buffer, never held as the chunks they came in: the command chooses how its output is framed
 * (dockerd writes a frame per read of its pipe, a byte each for a command that writes a byte at a
 * time), and a view kept per frame cost some 175 times the byte it held.
 */

import { sinkWait } from '../docker/index.js';

/** Length of the longest prefix of `buf` that does not end inside a UTF-8 sequence. */
export function utf8SafeLength(buf: Uint8Array): number {
  const end = buf.length;
  // A sequence is at most 4 bytes: look back at most 3 continuation bytes for its lead.
  for (let i = end - 1; i >= 0 && i >= end - 4; i -= 1) {
    const byte = buf[i] ?? 0;
    if ((byte & 0xc0) === 0x80) continue; // continuation byte
    const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return end - i >= need ? end : i;
  }
  return end;
}

/** The first buffer of a capture; it doubles from there, up to the cap. */
const FIRST_BUFFER_BYTES = 4096;

export class OutputCapture {
  private buffer = Buffer.alloc(0);
  private kept = 0;
  private dropped = false;

  constructor(private readonly maxBytes: number) {}

  push(chunk: Buffer): void {
    const take = Math.min(chunk.length, this.maxBytes - this.kept);
    if (take > 0) {
      this.reserve(this.kept + take);
      chunk.copy(this.buffer, this.kept, 0, take);
      this.kept += take;
    }
    if (take < chunk.length) this.dropped = true;
  }

  get truncated(): boolean {
    return this.dropped;
  }

  bytes(): Buffer {
    const all = this.bytesRaw();
    return this.dropped ? all.subarray(0, utf8SafeLength(all)) : all;
  }

  /** The kept bytes without the UTF-8 cut (for binary data). */
  bytesRaw(): Buffer {
    return this.buffer.subarray(0, this.kept);
  }

  /** Room for `size` bytes: the buffer doubled (at most to the cap), so a copy is rare. */
  private reserve(size: number): void {
    if (size <= this.buffer.length) return;
    const next = Buffer.alloc(Math.min(this.maxBytes, Math.max(size, this.buffer.length * 2, FIRST_BUFFER_BYTES)));
    this.buffer.copy(next, 0, 0, this.kept);
    this.buffer = next;
  }

  text(): string {
    return this.bytes().toString('utf8');
  }
}

/**
 * One output stream of a command passed on to a caller as it arrives (ExecOptions.onOutput), and
 * never kept: what comes before `release` (the command's start byte) is held, up to the cap, for
 * the error that names a failed start, and passed on at the release; a command that never began
 * passes nothing on. After the release everything is passed on, with no cap: nothing of it is
 * held, so the cap has no memory to protect, and output cut silently in the middle (an archive
 * written to a file) would pass for the whole. `truncated` says the held part lost bytes, or
 * output after a kill was dropped (stop).
 */
export class StreamedOutput {
  private readonly held: OutputCapture;
  private released = false;
  /** The sink's wait, until it settles. */
  private waiting: Promise<unknown> | undefined;
  private stopped = false;
  private dropped = false;

  /** `sink` may return a promise: the chunk is not all taken yet (a slow reader); see push. */
  constructor(maxHeldBytes: number, private readonly sink: (chunk: Buffer) => unknown) {
    this.held = new OutputCapture(maxHeldBytes);
  }

  /** Returns the sink's promise, if it gave one: read no more output until it settles. */
  push(chunk: Buffer): Promise<unknown> | undefined {
    if (this.released) return this.pass(chunk);
    this.held.push(chunk);
    return undefined;
  }

  /** The command began: pass on what was held, and everything from now on. As push, returns the sink's wait. */
  release(): Promise<unknown> | undefined {
    if (this.released) return undefined;
    this.released = true;
    return this.pass(this.held.bytesRaw());
  }

  /**
   * The command is being killed, and its connection is read on whatever the sink waits for (the
   * kill waits for the output to end): from now on a chunk that comes while the sink still waits
   * is dropped. Passed on, a command that outlives the kill for a while (a kill slow to scan a
   * busy sandbox, a process only the container's restart ends) would pile its output up in a sink
   * that asked to wait, at the connection's pace: the CLI's queue for a reader that never drains.
   */
  stop(): void {
    this.stopped = true;
  }

  /** The held part lost bytes, or output was dropped after a kill (stop). */
  get truncated(): boolean {
    return this.held.truncated || this.dropped;
  }

  /** What was held and never passed on (a command that did not begin), else nothing. */
  text(): string {
    return this.released ? '' : this.held.text();
  }

  private pass(chunk: Buffer): Promise<unknown> | undefined {
    if (chunk.length === 0) return undefined;
    if (this.stopped && this.waiting !== undefined) {
      this.dropped = true;
      return undefined;
    }
    const wait = sinkWait(this.sink(chunk));
    if (wait !== undefined) {
      this.waiting = wait;
      const settled = (): void => {
        if (this.waiting === wait) this.waiting = undefined;
      };
      wait.then(settled, settled);
    }
    return wait;
  }
}
