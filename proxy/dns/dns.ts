/**
 * The lookups the policy's pinned resolution runs: A and AAAA once per request (an inspected
 * connection is one: its requests go to its checked addresses), with a timeout, asked of the DNS
 * servers the operator named, or of those in /etc/resolv.conf.
 *
 * Always through c-ares on the event loop, never getaddrinfo: getaddrinfo runs on libuv's
 * threadpool (four threads) and cannot be cancelled, so a few lookups of names whose servers never
 * answer (any name under an allowed wildcard will do) held every thread for the resolver's whole
 * retry schedule and stalled DNS for every other request. c-ares queries end at their deadline.
 * /etc/hosts is not consulted.
 */
import { promises as dnsPromises } from 'node:dns';
import type { LookupOutcome } from '../../policy/index.js';
import { clientShare, MAX_LOOKUPS_IN_FLIGHT } from '../budget/index.js';

export interface LookupOptions {
  /** `IP` or `IP:PORT` / `[IPv6]:PORT`; empty means the servers of /etc/resolv.conf. */
  readonly servers: readonly string[];
  readonly timeoutMs: number;
  /** Most lookups in flight; MAX_LOOKUPS_IN_FLIGHT unless the open-file limit holds fewer. */
  readonly maxInFlight?: number;
  /** The most of them one client may hold, as a fraction (budget/limits.ts shareFraction); default a quarter. */
  readonly shareFraction?: number;
}

const NOT_FOUND = new Set(['ENOTFOUND', 'ENODATA', 'NXDOMAIN', 'ESERVFAIL', 'EREFUSED', 'EBADRESP', 'ECONNREFUSED']);

/**
 * Most addresses of one family an answer may hold. c-ares takes a 64 KiB answer whole, about
 * 4,000 A records: held until the other family's answer came (a lying server holds it back to
 * the deadline), they were a few hundred KiB outside the memory budget for each lookup in flight.
 * Such an answer is refused as it arrives, the name with it, and dropped at once. No name in use
 * needs more: a classic 512-byte answer holds 29 A records.
 */
export const MAX_ANSWER_ADDRESSES = 128;

/** An answer of one family past MAX_ANSWER_ADDRESSES. */
class OversizedAnswer extends Error {}

function bounded(name: string, family: 'A' | 'AAAA', query: Promise<string[]>): Promise<string[]> {
  return query.then((addresses) => {
    if (addresses.length <= MAX_ANSWER_ADDRESSES) return addresses;
    throw new OversizedAnswer(`the DNS answer for ${name} holds ${addresses.length} ${family} records, more than the ${MAX_ANSWER_ADDRESSES} the proxy takes`);
  });
}

function failed(name: string, err: unknown): LookupOutcome {
  const code = (err as NodeJS.ErrnoException)?.code ?? 'error';
  if (code === 'ETIMEOUT') return { ok: false, reason: 'dns_timeout', detail: `no DNS answer for ${name} in time` };
  return { ok: false, reason: 'dns_failed', detail: `DNS lookup of ${name} failed (${code})` };
}

/** Races a lookup against the deadline; a lookup still running afterwards is abandoned. */
async function withDeadline(name: string, timeoutMs: number, work: Promise<LookupOutcome>): Promise<LookupOutcome> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<LookupOutcome>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, reason: 'dns_timeout', detail: `no DNS answer for ${name} within ${timeoutMs} ms` }), timeoutMs);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}


/** One lookup under way: its outcome (at its deadline at the latest), and the end of its queries. */
export interface LookupWork {
  readonly outcome: Promise<LookupOutcome>;
  /** Settles when c-ares has given up the lookup's queries, which can be after the deadline. */
  readonly queriesDone: Promise<unknown>;
}

/**
 * A lookup made for a client (its address): the lookups in flight are a shared pool, and each
 * client may hold only its share of it. A lookup without a client counts as one client's.
 */
export type ClientLookup = (name: string, client?: string) => Promise<LookupOutcome>;

/**
 * Caps the lookups in flight, in all and per client (clientShare: a quarter of the cap), and
 * shares one lookup among concurrent requests for a name (joining one costs no slot). A slot is
 * held until the lookup's queries end, not just its deadline: c-ares keeps retrying on its own
 * schedule (several seconds past a 5 s deadline with two servers), and those queries are what
 * the cap bounds. One client asking for names whose servers never answer holds its share, never
 * the pool.
 */
export function limitLookups(start: (name: string) => LookupWork, max = MAX_LOOKUPS_IN_FLIGHT, fraction?: number): ClientLookup {
  const shared = new Map<string, Promise<LookupOutcome>>();
  const perClient = new Map<string, number>();
  const share = clientShare(max, Infinity, fraction);
  let live = 0;
  return (name, client = '') => {
    const joined = shared.get(name);
    if (joined !== undefined) return joined;
    const mine = perClient.get(client) ?? 0;
    if (mine >= share) {
      return Promise.resolve({ ok: false, reason: 'dns_failed', detail: `too many DNS lookups in flight from ${client || 'this client'} (its share: ${share}); retry later` });
    }
    if (live >= max) {
      return Promise.resolve({ ok: false, reason: 'dns_failed', detail: `too many DNS lookups in flight (${max}); retry later` });
    }
    live++;
    perClient.set(client, mine + 1);
    const work = start(name);
    void work.queriesDone.finally(() => {
      live--;
      const left = (perClient.get(client) ?? 1) - 1;
      if (left === 0) perClient.delete(client);
      else perClient.set(client, left);
    });
    const outcome = work.outcome.finally(() => shared.delete(name));
    shared.set(name, outcome);
    return outcome;
  };
}

export function createLookup(options: LookupOptions): ClientLookup {
  const { servers, timeoutMs, maxInFlight = MAX_LOOKUPS_IN_FLIGHT, shareFraction } = options;
  // A first try of a third of the deadline leaves room for a retry within it.
  const resolver = new dnsPromises.Resolver({ timeout: Math.max(1, Math.floor(timeoutMs / 3)), tries: 2 });
  // Without servers of its own the resolver keeps those of /etc/resolv.conf.
  if (servers.length > 0) resolver.setServers([...servers]);
  return limitLookups((name) => {
    const queries = Promise.allSettled([bounded(name, 'A', resolver.resolve4(name)), bounded(name, 'AAAA', resolver.resolve6(name))]);
    return { outcome: withDeadline(name, timeoutMs, queries.then((settled) => outcomeOf(name, settled))), queriesDone: queries };
  }, maxInFlight, shareFraction);
}

function outcomeOf(name: string, [v4, v6]: PromiseSettledResult<string[]>[]): LookupOutcome {
  // Never the other family's addresses alone: the name is refused.
  const oversized = [v4, v6].find((r) => r?.status === 'rejected' && r.reason instanceof OversizedAnswer) as PromiseRejectedResult | undefined;
  if (oversized !== undefined) return { ok: false, reason: 'dns_failed', detail: (oversized.reason as Error).message };
  const addresses = [
    ...(v4?.status === 'fulfilled' ? v4.value : []),
    ...(v6?.status === 'fulfilled' ? v6.value : []),
  ];
  if (addresses.length > 0) return { ok: true, addresses };
  // Prefer the more telling error: a timeout on either family beats "no data" on the other.
  const errors = [v4, v6].flatMap((r) => (r?.status === 'rejected' ? [r.reason as NodeJS.ErrnoException] : []));
  const timeout = errors.find((e) => e.code === 'ETIMEOUT');
  if (timeout) return failed(name, timeout);
  const first = errors.find((e) => !NOT_FOUND.has(e.code ?? '')) ?? errors[0];
  return first ? failed(name, first) : { ok: false, reason: 'dns_failed', detail: `${name} has no A or AAAA record` };
}
