/**
 * The proxy's own listeners as destinations. A listed name that resolves to the proxy's own
 * public address, on a port it listens on, would have the proxy connect to itself: each request
 * opens another, until the connection slots of every client are gone. Such a target is refused
 * like any other address the proxy may not reach. Pure: the listeners and the machine's interface
 * addresses come in as values, already in canonicalAddress's spelling (made once, when a listener
 * binds or the interfaces are read, not on every request).
 */
import ipaddr from 'ipaddr.js';

export interface Listener {
  /** The bound address (canonical): one of the machine's, or unspecified (0.0.0.0, ::) for all of them. */
  readonly address: string;
  readonly port: number;
}

/** An address in one spelling: IPv4-mapped IPv6 as its IPv4, IPv6 compressed, no zone; undefined for no address. */
export function canonicalAddress(address: string): string | undefined {
  try {
    return ipaddr.process(address.replace(/%.*$/, '')).toString();
  } catch {
    return undefined;
  }
}

/**
 * Whether `address:port` is one of the proxy's listeners: a listener bound to that address, or
 * bound to every address while `address` is one of the machine's (`local`).
 */
export function isOwnListener(address: string, port: number, listeners: readonly Listener[], local: ReadonlySet<string>): boolean {
  const onPort = listeners.filter((l) => l.port === port);
  if (onPort.length === 0) return false;
  const target = canonicalAddress(address);
  if (target === undefined) return false;
  return onPort.some((l) => l.address === target || ((l.address === '0.0.0.0' || l.address === '::') && local.has(target)));
}
