/**
 * Splits Docker's multiplexed exec stream (8-byte frame headers: stream type, 3 zero bytes,
 * big-endian payload length) into stdout and stderr. Written here rather than using
 * docker-modem's demuxStream because that one re-concatenates its whole buffer on every chunk
 * (slow for 20 MB files) and cannot report a malformed stream.
 */

export type FrameSink = (stream: 'stdout' | 'stderr', payload: Buffer) => void;

export class StreamDemux {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private frameType = -1;
  private frameLeft = 0;

  constructor(private readonly sink: FrameSink) {}

  push(chunk: Buffer): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.frameLeft > 0) {
        const take = Math.min(this.frameLeft, chunk.length - offset);
        this.emit(chunk.subarray(offset, offset + take));
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
      if (this.pendingBytes < 8) return;
      const header = Buffer.concat(this.pending, 8);
      this.pending = [];
      this.pendingBytes = 0;
      const type = header.readUInt8(0);
      if (type > 2) throw new Error(`malformed Docker stream: frame type ${type}`);
      this.frameType = type;
      this.frameLeft = header.readUInt32BE(4);
    }
  }

  /** True when the stream ended on a frame boundary. */
  get complete(): boolean {
    return this.frameLeft === 0 && this.pendingBytes === 0;
  }

  private emit(payload: Buffer): void {
    // Type 0 (stdin echo) does not occur without a TTY; treat it as stdout like Docker does.
    this.sink(this.frameType === 2 ? 'stderr' : 'stdout', payload);
  }
}
