/**
 * The proxy's limits, as one zod schema: the type, the defaults and the descriptions (also the
 * --help text) come from here. Every limit has a safe default.
 */
import { z } from 'zod';

const whole = (min: number) => z.number().int().min(min);
// Node's timers hold at most 2^31-1 ms (about 24.8 days); a longer one would fire after 1 ms.
const ms = (min: number) => whole(min).max(2 ** 31 - 1);

export const LimitsSchema = z.object({
  maxHeaderBytes: whole(1024).default(16 * 1024).describe('largest request head in bytes (then 431)'),
  headerTimeoutMs: ms(1).default(10_000).describe('time for a complete request head (then 408)'),
  idleTimeoutMs: ms(1).default(300_000).describe('close a tunnel or connection with no traffic either way for this long'),
  maxTunnelMs: ms(0).default(0).describe('longest tunnel lifetime, 0 for none'),
  helloTimeoutMs: ms(1).default(10_000).describe('time for the complete TLS ClientHello of a tls tunnel (then the tunnel is refused)'),
  dnsTimeoutMs: ms(1).default(5_000).describe('DNS deadline per request (then 504)'),
  connectTimeoutMs: ms(1).default(10_000).describe('connect deadline per upstream address'),
  maxConnections: whole(1).default(16_384).describe('open client connections in total (then 503)'),
  maxConnectionsPerClient: whole(1).default(4_096).describe('open client connections from one client address, at most a quarter of maxConnections (then 429)'),
});

export type ProxyLimits = Readonly<z.output<typeof LimitsSchema>>;

export const DEFAULT_LIMITS: ProxyLimits = Object.freeze(LimitsSchema.parse({}));

/**
 * The most of a shared pool (connections, DNS lookups in flight, the memory budget) one client
 * address may hold: a share that collapses to the whole when a plan lowers the total would let one
 * client deny service to every other.
 */
export const MAX_CLIENT_SHARE = 0.25;

/**
 * A sandbox's share on a shared proxy, which serves a shard's worth of sandboxes (250 by
 * default): a quarter each would let four of them, one user's four conversations, hold every
 * connection, lookup and byte of the budget, and starve the rest.
 */
export const SANDBOX_SHARE = 1 / 16;

/** The most of each pool one client may hold: a sandbox's share on a shared proxy, else MAX_CLIENT_SHARE. */
export function shareFraction(shared: boolean): number {
  return shared ? SANDBOX_SHARE : MAX_CLIENT_SHARE;
}

/** A client's share is never cut below this many (a pool this small is shared whole). */
export const CLIENT_SHARE_FLOOR = 8;

/**
 * One client's share of a pool of `total`: what it asked for (`wanted`), at most `fraction` of the
 * pool (a quarter, a sandbox's share on a shared proxy), and at least CLIENT_SHARE_FLOOR (or the
 * whole of a smaller pool).
 */
export function clientShare(total: number, wanted = Infinity, fraction = MAX_CLIENT_SHARE): number {
  return Math.max(1, Math.min(wanted, total, Math.max(CLIENT_SHARE_FLOOR, Math.floor(total * fraction))));
}

/**
 * Most lookups in flight at once (each holds two c-ares queries, A and AAAA). c-ares numbers its
 * queries with 16 bits and, with all 65,536 numbers taken, loops forever on the event loop: a
 * flood of lookups for names whose servers never answer (pipelined requests under a wildcard entry)
 * froze the process. Beyond the cap a lookup fails at once instead. c-ares also does work per
 * query on every timeout pass (measured: 4,096 silent lookups stalled the loop ~370 ms, 1,024 ~100
 * ms), so the cap is kept well below what one workload's distinct names in flight need.
 */
export const MAX_LOOKUPS_IN_FLIGHT = 1_024;
