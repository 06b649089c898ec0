/**
 * A connect hook for a test proxy (`connect`) whose dials to the `held` addresses never connect by
 * themselves: each socket stands for a dial still under way, kept for the test to judge (the proxy
 * destroys it when it gives the dial up) or to let through. Any other address is dialled as the
 * proxy would.
 */
import net from 'node:net';
import { defaultConnect, type Connect } from '../../proxy/index.js';

export interface HeldDials {
  readonly connect: Connect;
  /** Every held dial, oldest first. */
  readonly sockets: readonly net.Socket[];
  /** The held dials to `address`. */
  to(address: string): net.Socket[];
  /** Destroys every held dial (a test's teardown). */
  destroy(): void;
}

export function heldDials(...held: string[]): HeldDials {
  const dials: { readonly address: string; readonly socket: net.Socket }[] = [];
  return {
    connect: (address, port, purpose) => {
      if (!held.includes(address)) return defaultConnect(address, port, purpose);
      const socket = new net.Socket({ allowHalfOpen: true });
      dials.push({ address, socket });
      return socket;
    },
    get sockets() {
      return dials.map((d) => d.socket);
    },
    to: (address) => dials.filter((d) => d.address === address).map((d) => d.socket),
    destroy: () => {
      for (const { socket } of dials) socket.destroy();
    },
  };
}
