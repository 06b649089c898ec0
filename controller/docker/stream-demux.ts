/**
 * Splits Docker's multiplexed exec stream (8-byte frame headers: stream type, 3 zero bytes,
 * big-endian payload length) into stdout and stderr. Written here rather than using
 * docker-modem's demuxStream because that one re-concatenates its whole buffer on every chunk
 * (slow for 20 MB files) and cannot report a malformed stream.
 */

/**
 * A sink that returns a promise (a thenable) asks for no more frames until it settles
 * (StreamDemux.push); any other value is ignored.
 */
export type FrameSink = (stream: 'stdout' | 'stderr', payload: Buffer) => unknown;

/** The promise a sink returned, if it returned one. */
export function sinkWait(value: unknown): Promise<unknown> | undefined {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function' ? Promise.resolve(value) : undefined;
}

export class StreamDemux {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private frameType = -1;
  private frameLeft = 0;

  constructor(private readonly sink: FrameSink) {}

  /** Passes on the frames of `chunk`; returns what the sink asked to wait for, if anything. */
  push(chunk: Buffer): Promise<unknown>[] {
    const waits: Promise<unknown>[] = [];
    let offset = 0;
    while (offset < chunk.length) {
      if (this.frameLeft > 0) {
        const take = Math.min(this.frameLeft, chunk.length - offset);
        const wait = this.emit(chunk.subarray(offset, offset + take));
        if (wait !== undefined) waits.push(wait);
        this.frameLeft -= take;
        offset += take;
        continue;
      }
      // Collect a full 8-byte header (it may be split across chunks).
      const need = 8 - this.pendingBytes;
      const take = Math.min(need, chunk.length - offset);
      this.pending.push(chunk.subarray(offset, offset + take));
      this.pendingBytes += take;
      offset += take;
      if (this.pendingBytes < 8) return waits;
      const header = Buffer.concat(this.pending, 8);
      this.pending = [];
      this.pendingBytes = 0;
      const type = header.readUInt8(0);
      if (type > 2) throw new Error(`malformed Docker stream: frame type ${type}`);
      this.frameType = type;
      this.frameLeft = header.readUInt32BE(4);
    }
    return waits;
  }

  /**
   * Passes on the frames of `chunk` read from `source`; a sink that waits (a slow reader) pauses
   * `source` until it settles, so the engine's connection holds the rest, never this process.
   */
  pushPaced(source: { pause(): unknown; resume(): unknown }, chunk: Buffer): void {
    const waits = this.push(chunk);
    if (waits.length === 0) return;
    source.pause();
    void Promise.allSettled(waits).then(() => source.resume());
  }

  /** True when the stream ended on a frame boundary. */
  get complete(): boolean {
    return this.frameLeft === 0 && this.pendingBytes === 0;
  }

  private emit(payload: Buffer): Promise<unknown> | undefined {
    // Type 0 (stdin echo) does not occur without a TTY; treat it as stdout like Docker does.
    return sinkWait(this.sink(this.frameType === 2 ? 'stderr' : 'stdout', payload));
  }
}
