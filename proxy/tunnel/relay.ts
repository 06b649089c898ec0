/** One direction of an open tunnel: bytes passed on with backpressure, what a pause holds charged. */
import type { Socket } from 'node:net';
import { READ_AHEAD_BYTES, type Charge, type Held } from '../budget/index.js';
import { readInto } from '../upstream/index.js';

/** Starts passing the bytes of a direction on, server to client (`down`) or client to server (`up`). */
export interface Relays {
  down(): void;
  up(): void;
}

/**
 * Passes `from`'s bytes to `to` with backpressure, as `pipe` would: when `to` has more queued than
 * it wants, `from` is paused until `to` drains. What the pause leaves held (`to`'s queue, and what
 * `from` reads before it stops) is charged to the connection's memory until the drain; `evict`
 * ends the tunnel when the client is past its share (memory-budget.ts). An upstream that reads
 * into a buffer of its own (own-buffer.ts) passes each read on from that buffer, and pauses until
 * `to` has written it whenever `to` could not take it at once: its buffer is read into again only
 * then.
 */
export function relay(from: Socket, to: Socket, memory: Charge, evict: () => void): void {
  let held: Held | undefined;
  const release = (): void => {
    held?.release();
    held = undefined;
  };
  const resume = (): void => {
    release();
    from.resume();
  };
  /** Pauses `from`; charged until `resume`, unless `to` is ending or closed and never drains. */
  const stall = (): void => {
    from.pause();
    if (to.destroyed || to.writableEnded) return;
    held = memory.hold(to.writableLength + READ_AHEAD_BYTES, evict);
  };
  // A read waits on every write before it: the buffer is free once `to` holds nothing more.
  const written = (err?: Error | null): void => {
    if (held !== undefined && !err && to.writableLength === 0) resume();
  };
  const own = readInto(from, (view) => {
    to.write(view, written);
    if (to.writableLength === 0 || held !== undefined) return true;
    stall();
    return false;
  });
  if (!own) {
    from.on('data', (chunk: Buffer) => {
      if (to.write(chunk) || held !== undefined) return;
      stall();
      if (held !== undefined) to.once('drain', resume);
    });
  }
  from.once('end', () => to.end());
  // Ended with a write still queued: no drain comes, and the hold ends once the queue is flushed.
  to.once('finish', release);
  from.once('close', release);
  to.once('close', release);
  // Flowing from here, as `pipe` makes it, even if the socket was paused across its hand-over.
  from.resume();
}
