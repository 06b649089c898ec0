/**
 * The proxy's own listeners as destinations. A listed name that resolves to the proxy's own
 * public address, on a port it listens on, would have the proxy connect to itself: each request
 * opens another, until the connection slots of every client are gone. Such a target is refused
 * like any other address the proxy may not reach. Pure: the listeners and the machine's interface
 * addresses come in as functions.
 */
import ipaddr from 'ipaddr.js';

export interface Listener {
  /** The bound address: one of the machine's, or unspecified (0.0.0.0, ::) for all of them. */
  readonly address: string;
  readonly port: number;
}

/** An address in one spelling: IPv4-mapped IPv6 as its IPv4, IPv6 compressed; undefined for no address. */
function canonical(address: string): string | undefined {
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
export function isOwnListener(address: string, port: number, listeners: readonly Listener[], local: readonly string[]): boolean {
  const target = canonical(address);
  if (target === undefined) return false;
  const onPort = listeners.filter((l) => l.port === port);
  if (onPort.length === 0) return false;
  const everywhere = onPort.some((l) => {
    const bound = canonical(l.address);
    return bound === '0.0.0.0' || bound === '::';
  });
  if (everywhere && local.some((a) => canonical(a) === target)) return true;
  return onPort.some((l) => canonical(l.address) === target);
}
