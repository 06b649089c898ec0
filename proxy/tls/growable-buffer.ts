/**
 * Bytes appended one chunk at a time into one buffer that grows as it fills, up to a cap: a peer
 * that trickles bytes in tiny writes costs what one large write does (no array of tiny Buffers,
 * and few copies: the buffer doubles while small, then grows by GROWTH_STEP).
 *
 * What it holds is what the memory budget charges (`capacity`), so it never allocates more than a
 * step past what it was given, and never from Node's shared Buffer pool: a pool slice would keep
 * the whole 8 KiB slab it came from alive, which no charge would see.
 */

/** Growth beyond this size is by this much at a time, so the capacity is at most this past the length. */
const GROWTH_STEP = 8 * 1024;

export class GrowableBuffer {
  private buf: Buffer;
  private used = 0;

  constructor(
    /** Most bytes it will hold; `append` reports whether the chunk fitted. */
    private readonly cap: number,
    initial = 0,
  ) {
    this.buf = Buffer.allocUnsafeSlow(Math.min(initial, cap));
  }

  get length(): number {
    return this.used;
  }

  /** Bytes allocated (at least `length`): what holding these bytes costs. */
  get capacity(): number {
    return this.buf.length;
  }

  /** Appends `chunk`; false (and nothing appended) when it would pass the cap. */
  append(chunk: Uint8Array): boolean {
    const need = this.used + chunk.length;
    if (need > this.cap) return false;
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafeSlow(Math.min(this.cap, Math.max(need, this.buf.length + Math.min(this.buf.length, GROWTH_STEP))));
      this.buf.copy(grown, 0, 0, this.used);
      this.buf = grown;
    }
    this.buf.set(chunk, this.used);
    this.used = need;
    return true;
  }

  /**
   * The bytes so far: a view that stays valid and unchanged (appends only write past it, and a
   * growth copies into a new buffer).
   */
  bytes(): Buffer {
    return this.buf.subarray(0, this.used);
  }
}
