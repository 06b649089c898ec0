/** One direction of an open tunnel: bytes passed on with backpressure, what a pause holds charged. */
import type { Socket } from 'node:net';
import { READ_AHEAD_BYTES, type Charge, type Held } from '../budget/index.js';

/** Starts passing the bytes of a direction on, server to client (`down`) or client to server (`up`). */
export interface Relays {
  down(): void;
  up(): void;
}

/**
 * Passes `from`'s bytes to `to` with backpressure, as `pipe` would: when `to` has more queued than
 * it wants, `from` is paused until `to` drains. What the pause leaves held (`to`'s queue, and what
 * `from` reads before it stops) is charged to the connection's memory until the drain; `evict`
 * ends the tunnel when the client is past its share (memory-budget.ts).
 */
export function relay(from: Socket, to: Socket, memory: Charge, evict: () => void): void {
  let held: Held | undefined;
  const release = (): void => {
    held?.release();
    held = undefined;
  };
  const drained = (): void => {
    release();
    from.resume();
  };
  from.on('data', (chunk: Buffer) => {
    if (to.write(chunk) || held !== undefined) return;
    from.pause();
    // An ending or closed destination never drains: nothing is held for it (its queue is flushed
    // or dropped with it), and the source stays paused until the tunnel ends.
    if (to.destroyed || to.writableEnded) return;
    to.once('drain', drained);
    held = memory.hold(to.writableLength + READ_AHEAD_BYTES, evict);
  });
  from.once('end', () => to.end());
  // Ended with a write still queued: no drain comes, and the hold ends once the queue is flushed.
  to.once('finish', release);
  from.once('close', release);
  to.once('close', release);
  // Flowing from here, as `pipe` makes it, even if the socket was paused across its hand-over.
  from.resume();
}
