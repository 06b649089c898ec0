/**
 * The proxy's own listeners, as it binds them, and the machine's interface addresses (read again
 * at most once a second: an address can appear after start): what the self-loop check
 * (own-address.ts) compares each destination with.
 */
import os from 'node:os';
import { canonicalAddress, isOwnListener, type Listener } from './own-address.js';

/** How long the machine's interface addresses are taken as read. */
const INTERFACES_REFRESH_MS = 1_000;

export class OwnListeners {
  private readonly listeners: Listener[] = [];
  private interfaces = { at: -Infinity, addresses: new Set<string>() };

  /** A listener bound to `address:port` (0.0.0.0 or :: for every address). */
  add(address: string, port: number): void {
    this.listeners.push({ address: canonicalAddress(address) ?? address, port });
  }

  /** Whether `address:port` is one of them: dialling it would loop through the proxy. */
  readonly has = (address: string, port: number): boolean => isOwnListener(address, port, this.listeners, this.machineAddresses());

  private machineAddresses(): ReadonlySet<string> {
    const now = Date.now();
    if (now - this.interfaces.at > INTERFACES_REFRESH_MS) {
      const all = Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((i) => canonicalAddress(i.address)));
      this.interfaces = { at: now, addresses: new Set(all.filter((a) => a !== undefined)) };
    }
    return this.interfaces.addresses;
  }
}
