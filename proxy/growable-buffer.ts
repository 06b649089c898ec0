/**
 * Bytes appended one chunk at a time into one buffer that doubles as it fills, up to a cap: a
 * peer that trickles bytes in tiny writes costs what one large write does (no array of tiny
 * Buffers, no copy per append beyond the amortised doubling).
 */
export class GrowableBuffer {
  private buf: Buffer;
  private used = 0;

  constructor(
    /** Most bytes it will hold; `append` reports whether the chunk fitted. */
    private readonly cap: number,
    initial = 1024,
  ) {
    this.buf = Buffer.allocUnsafe(Math.min(initial, cap));
  }

  get length(): number {
    return this.used;
  }

  /** Appends `chunk`; false (and nothing appended) when it would pass the cap. */
  append(chunk: Uint8Array): boolean {
    const need = this.used + chunk.length;
    if (need > this.cap) return false;
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.min(this.cap, Math.max(need, this.buf.length * 2)));
      this.buf.copy(grown, 0, 0, this.used);
      this.buf = grown;
    }
    this.buf.set(chunk, this.used);
    this.used = need;
    return true;
  }

  /** The bytes so far (a view, valid until the next append). */
  bytes(): Buffer {
    return this.buf.subarray(0, this.used);
  }
}
