/**
 * The proxy's limits against the open-file limit (RLIMIT_NOFILE) the process really has. A client
 * connection can hold two descriptors (the client's and the upstream's); c-ares retries each
 * silent DNS query on a socket of its own, so every lookup in flight can hold two more (A and
 * AAAA); a few go to the listeners, the policy watch and stdio; in transparent mode the DNS
 * responder's TCP connections, at most their own cap, take one each. When the limit cannot hold
 * all of that, the connection cap and the lookup cap are lowered to what fits: a client past them
 * gets a clean 503 `too_many_connections` or `dns_failed`, instead of the process running out of
 * descriptors for the lookups and dials of connections it already took.
 */
import { MAX_LOOKUPS_IN_FLIGHT } from './limits.js';

/**
 * Node's own start-up (it opens about a hundred module files at once: below ~100 descriptors it
 * fails with EMFILE before any of this runs), the listeners, the policy watch, stdio, the metrics
 * server and its scrapes, and the refused connections still lingering (at most 64: refusal.ts).
 */
const FIXED_DESCRIPTORS = 256;

/**
 * The open-file limit that holds `maxConnections` client connections and a full lookup cap;
 * `reserved`: descriptors other connections may hold besides (the DNS responder's TCP cap).
 */
export function openFilesFor(maxConnections: number, reserved = 0): number {
  return 2 * maxConnections + 2 * MAX_LOOKUPS_IN_FLIGHT + FIXED_DESCRIPTORS + reserved;
}

export interface DescriptorPlan {
  readonly maxConnections: number;
  readonly maxLookupsInFlight: number;
}

/**
 * The caps an open-file limit of `nofile` holds: the ones asked for when they fit; otherwise a
 * quarter of what is left after the fixed reserve goes to lookups (at most their own cap) and
 * the rest to connections. Undefined when not even one of each fits.
 */
export function planDescriptors(nofile: number, maxConnections: number, reserved = 0): DescriptorPlan | undefined {
  if (nofile >= openFilesFor(maxConnections, reserved)) return { maxConnections, maxLookupsInFlight: MAX_LOOKUPS_IN_FLIGHT };
  const spare = nofile - FIXED_DESCRIPTORS - reserved;
  const maxLookupsInFlight = Math.min(MAX_LOOKUPS_IN_FLIGHT, Math.floor(spare / 4));
  const connections = Math.min(maxConnections, Math.floor((spare - 2 * maxLookupsInFlight) / 2));
  if (maxLookupsInFlight < 1 || connections < 1) return undefined;
  return { maxConnections: connections, maxLookupsInFlight };
}

/** The smallest open-file limit that holds one connection and one lookup (and `reserved` besides). */
export function minOpenFiles(reserved = 0): number {
  return FIXED_DESCRIPTORS + reserved + 4;
}
export const MIN_OPEN_FILES = minOpenFiles();

/**
 * The soft "Max open files" of a /proc/<pid>/limits text; undefined when the line is missing or
 * the limit is "unlimited".
 */
export function softOpenFileLimit(limitsText: string): number | undefined {
  const line = /^Max open files\s+(\S+)\s+/m.exec(limitsText);
  if (line === null || !/^\d+$/.test(line[1] ?? '')) return undefined;
  return Number(line[1]);
}
