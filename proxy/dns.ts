/**
 * The lookups the policy's pinned resolution runs: A and AAAA once per request, with a timeout,
 * through the system resolver (getaddrinfo, so /etc/hosts and the container's resolv.conf apply)
 * or through the DNS servers the operator named.
 */
import { promises as dnsPromises } from 'node:dns';
import type { Lookup, LookupOutcome } from '../policy/index.js';

export interface LookupOptions {
  /** `IP` or `IP:PORT` / `[IPv6]:PORT`; empty means the system resolver. */
  readonly servers: readonly string[];
  readonly timeoutMs: number;
}

const NOT_FOUND = new Set(['ENOTFOUND', 'ENODATA', 'NXDOMAIN', 'ESERVFAIL', 'EREFUSED', 'EBADRESP', 'ECONNREFUSED']);

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

function systemLookup(timeoutMs: number): Lookup {
  return (name) =>
    withDeadline(
      name,
      timeoutMs,
      dnsPromises.lookup(name, { all: true, order: 'ipv4first' }).then(
        (answers): LookupOutcome => ({ ok: true, addresses: answers.map((a) => a.address) }),
        (err: unknown) => failed(name, err),
      ),
    );
}

function serverLookup(servers: readonly string[], timeoutMs: number): Lookup {
  // Two tries inside the deadline; c-ares retries on its own schedule.
  const resolver = new dnsPromises.Resolver({ timeout: Math.max(1, Math.floor(timeoutMs / 2)), tries: 2 });
  resolver.setServers([...servers]);
  return (name) =>
    withDeadline(
      name,
      timeoutMs,
      Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]).then(([v4, v6]): LookupOutcome => {
        const addresses = [
          ...(v4.status === 'fulfilled' ? v4.value : []),
          ...(v6.status === 'fulfilled' ? v6.value : []),
        ];
        if (addresses.length > 0) return { ok: true, addresses };
        // Prefer the more telling error: a timeout on either family beats "no data" on the other.
        const errors = [v4, v6].flatMap((r) => (r.status === 'rejected' ? [r.reason as NodeJS.ErrnoException] : []));
        const timeout = errors.find((e) => e.code === 'ETIMEOUT');
        if (timeout) return failed(name, timeout);
        const first = errors.find((e) => !NOT_FOUND.has(e.code ?? '')) ?? errors[0];
        return first ? failed(name, first) : { ok: false, reason: 'dns_failed', detail: `${name} has no A or AAAA record` };
      }),
    );
}

export function createLookup(options: LookupOptions): Lookup {
  return options.servers.length === 0 ? systemLookup(options.timeoutMs) : serverLookup(options.servers, options.timeoutMs);
}
