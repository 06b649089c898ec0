/**
 * The egress decision, as a value. A request is allowed only with the list of addresses that were
 * checked, and the dialer connects to exactly those (pinning): the name is never resolved a second
 * time, so a DNS server that answers differently on the next lookup (rebinding) gains nothing.
 */
import { classifyAddress } from './address-class.js';
import { parseHostName } from './host-name.js';
import type { TunnelMode } from './host-pattern.js';
import type { Policy } from './policy.js';
import type { Reason } from './reason.js';
import { checkRules, describeRules, type RequestRules } from './request-rules.js';
import type { SecretBinding } from './secret-binding.js';
import { screenHost } from './secrets.js';

export interface Denial {
  readonly allowed: false;
  readonly reason: Reason;
  readonly detail: string;
  readonly host?: string;
  readonly port?: number;
  readonly addresses?: readonly string[];
  /** What would allow it, where the policy says so instead of the catalog (Policy.refusalHint). */
  readonly advice?: string | undefined;
}

/**
 * Why a request allowed by report mode would have been refused in enforce mode. Only the
 * allowlist's and the ports' refusals are negotiable; every other check refuses in both modes.
 */
export interface WouldDeny {
  readonly reason: Extract<Reason, 'host_not_allowed' | 'port_not_allowed'>;
  readonly detail: string;
}

export interface AllowedTarget {
  readonly allowed: true;
  readonly host: string;
  readonly port: number;
  /** The allowlist entry that matched; none for a host that report mode let through. */
  readonly rule: string | undefined;
  /** What a CONNECT tunnel to this host may carry (the matched entry's mode). */
  readonly tunnel: TunnelMode;
  /** The matched entry's method and path rules: plain HTTP only, each request checked (checkRequest). */
  readonly rules?: RequestRules | undefined;
  /** Set only in report mode: the refusal enforce mode would have given. */
  readonly wouldDeny?: WouldDeny | undefined;
  /** The matched entry is inspected: a tunnel to it is TLS the proxy terminates (proxy/inspect/). */
  readonly inspect?: true | undefined;
  /** The matched entry's secrets (policy/secrets.ts puts them into requests inside an inspected connection). */
  readonly secrets?: readonly SecretBinding[] | undefined;
}

export interface Allowed extends AllowedTarget {
  /** Checked addresses, in the order to dial them. */
  readonly addresses: readonly string[];
  /**
   * Where they came from: a lookup, the policy's test hosts, or (a request inside an inspected
   * connection) the addresses that connection was allowed to, checked again (repinTarget).
   */
  readonly pinnedBy: 'dns' | 'test_host' | 'connection';
}

export type Decision = Allowed | Denial;

export type LookupOutcome =
  | { readonly ok: true; readonly addresses: readonly string[] }
  | { readonly ok: false; readonly reason: 'dns_failed' | 'dns_timeout'; readonly detail: string };

/** Resolves A and AAAA for a name, once. Supplied by the caller (the proxy owns the sockets). */
export type Lookup = (name: string) => Promise<LookupOutcome>;

// Fields listed one by one: V8 gives an object built by spread-plus-properties a new hidden class
// on every call, which costs microseconds on each request.
function allowed(target: AllowedTarget, addresses: readonly string[], pinnedBy: Allowed['pinnedBy']): Allowed {
  return {
    allowed: true,
    host: target.host,
    port: target.port,
    rule: target.rule,
    tunnel: target.tunnel,
    rules: target.rules,
    wouldDeny: target.wouldDeny,
    inspect: target.inspect,
    secrets: target.secrets,
    addresses,
    pinnedBy,
  };
}

/**
 * The checks that need no DNS: host syntax, literals, allowlist, port. In report mode a host off
 * the allowlist or a port off connectPorts is allowed with the refusal it would have got
 * (`wouldDeny`); a malformed host or an IP literal is refused in every mode, before the allowlist.
 */
export function checkTarget(policy: Policy, rawHost: string, port: number): AllowedTarget | Denial {
  // First, and without the host in the denial: a placeholder in a name would otherwise be written
  // down in every line that names the host (a wildcard entry would even allow it).
  const leaked = screenHost(policy.secrets, rawHost);
  if (leaked !== undefined) return { allowed: false, reason: leaked.reason, detail: leaked.detail, port };
  const parsed = parseHostName(rawHost);
  if (!parsed.ok) return { allowed: false, reason: parsed.reason, detail: parsed.detail, port };
  const host = parsed.name;
  const report = policy.mode === 'report';
  const pattern = policy.allowlist.match(host);
  let wouldDeny: WouldDeny | undefined;
  if (pattern === undefined) {
    const crossed = policy.allowlist.crossing(host);
    const detail =
      crossed === undefined
        ? `${host} is not on the allowlist`
        : `${host} is below the public suffix ${crossed.suffix}, where every name has an owner of its own, so ${crossed.entry} does not reach it; list ${host} itself`;
    if (!report) return { allowed: false, reason: 'host_not_allowed', detail, host, port, advice: policy.refusalHint };
    wouldDeny = { reason: 'host_not_allowed', detail };
  }
  if (!policy.connectPorts.has(port)) {
    const detail = `port ${port} is not an allowed port`;
    if (!report) return { allowed: false, reason: 'port_not_allowed', detail, host, port };
    // The first refusal is the one enforce mode would give (the host's, when both apply).
    wouldDeny ??= { reason: 'port_not_allowed', detail };
  }
  return { allowed: true, host, port, rule: pattern?.entry, tunnel: pattern?.tunnel ?? policy.tunnelDefault, rules: pattern?.rules, wouldDeny, inspect: pattern?.inspect, secrets: pattern?.secrets };
}

/**
 * A plain-HTTP request to an allowed target against its entry's method and path rules, if any:
 * the request target to forward (the path in the normal form that was compared), or the refusal.
 * `requestTarget` is in origin-form (`/path?query`); `rawHeaders` the request's name/value list.
 */
export function checkRequest(
  target: AllowedTarget,
  request: { readonly method: string; readonly target: string; readonly rawHeaders: readonly string[] },
): { readonly allowed: true; readonly target: string } | Denial {
  // Rules belong to a matched entry: a host only report mode let through has neither.
  if (target.rules === undefined || target.rule === undefined) return { allowed: true, target: request.target };
  const verdict = checkRules(target.rules, target.rule, request.method, request.target, request.rawHeaders);
  if (verdict.ok) return { allowed: true, target: verdict.target };
  return { allowed: false, reason: verdict.reason, detail: verdict.detail, host: target.host, port: target.port };
}

/**
 * A tunnel (CONNECT, transparent TLS) to an allowed target: refused when its entry has method or
 * path rules and is not inspected, since the requests inside such a tunnel are out of the proxy's
 * sight and would pass them. Inside an inspected one, each request is checked.
 */
function checkTunnel(target: AllowedTarget): AllowedTarget | Denial {
  if (target.rules === undefined || target.inspect === true) return target;
  const detail = `the allowHosts entry ${target.rule} has rules (${describeRules(target.rules)}) that the proxy can check only in plain HTTP, so it allows no tunnel`;
  return { allowed: false, reason: 'tunnel_not_allowed', detail, host: target.host, port: target.port };
}

/** A plain-HTTP request as its entry's method and path rules were checked (checkRequest). */
export interface OpenRequest {
  readonly method: string;
  readonly target: string;
  readonly rawHeaders: readonly string[];
}

/**
 * What an open connection was allowed to: a tunnel, in the mode it runs in (`opaque` when no
 * ClientHello was checked), or a plain-HTTP request's host and port and the request itself.
 */
export type OpenTarget =
  | { readonly kind: 'http'; readonly host: string; readonly port: number; readonly request?: OpenRequest }
  | { readonly kind: 'tunnel'; readonly host: string; readonly port: number; readonly mode: TunnelMode };

/**
 * An open connection against a policy that changed since it was allowed: the checks that need no
 * DNS which a new connection of its kind gets, a tunnel's included. An opaque tunnel is refused
 * where the host's tunnels are now `tls`: its ClientHello was never checked, and a new one's is.
 */
export function recheckTarget(policy: Policy, open: OpenTarget): AllowedTarget | Denial {
  const checked = checkTarget(policy, open.host, open.port);
  if (!checked.allowed) return checked;
  if (open.kind === 'http') {
    // Its latest request, against the entry's rules now: a POST streaming its body to a host
    // narrowed to GET is ended, as a new one would be refused.
    const ruled = open.request === undefined ? checked : checkRequest(checked, open.request);
    return ruled.allowed ? checked : ruled;
  }
  const target = checkTunnel(checked);
  if (!target.allowed || open.mode === 'tls' || target.tunnel === 'opaque') return target;
  const detail = `a tunnel to ${target.host} must now name it in its ClientHello, and this one was opened opaque, its hello never checked`;
  return { allowed: false, reason: 'policy_revoked', detail, host: target.host, port: target.port };
}

/**
 * Whether an address and port is one of the proxy's own listeners (the proxy knows; the policy
 * does not): a request there would loop back into the proxy.
 */
export type OwnListener = (address: string, port: number) => boolean;

/**
 * Addresses a decision keeps of an answer, in order, once every one of them has been checked. A
 * DNS server answering for an allowed name can send thousands (a 64 KiB answer holds about 4,000
 * A records, and c-ares takes it whole): kept, each connection held them outside the memory
 * budget for its life (about 450 KiB), had every one dialled in turn and written into its lines.
 */
export const MAX_PINNED_ADDRESSES = 16;

/**
 * Every address must be public unicast, and none one of the proxy's own listeners; one that is
 * not denies the whole request. The first MAX_PINNED_ADDRESSES are pinned.
 */
export function checkAddresses(target: AllowedTarget, addresses: readonly string[], ownListener?: OwnListener, pinnedBy: 'dns' | 'connection' = 'dns'): Decision {
  const all = addresses.length < 2 ? addresses : [...new Set(addresses)];
  const pinned = all.length > MAX_PINNED_ADDRESSES ? all.slice(0, MAX_PINNED_ADDRESSES) : all;
  if (pinned.length === 0) {
    return { allowed: false, reason: 'dns_failed', detail: `${target.host} has no A or AAAA record`, host: target.host, port: target.port };
  }
  for (const address of all) {
    const verdict = classifyAddress(address);
    if (!verdict.public) {
      const via = verdict.via ? ` via ${verdict.via}` : '';
      return {
        allowed: false,
        reason: 'address_not_allowed',
        detail: `${target.host} resolves to ${address}, which is ${verdict.addressClass} (${verdict.range}${via})`,
        host: target.host,
        port: target.port,
        addresses: pinned,
      };
    }
    if (ownListener?.(address, target.port) === true) {
      return {
        allowed: false,
        reason: 'address_not_allowed',
        detail: `${target.host} resolves to ${address}, the proxy's own address: port ${target.port} there is one of its listeners, and a request to it would loop back into the proxy`,
        host: target.host,
        port: target.port,
        addresses: pinned,
      };
    }
  }
  return allowed(target, pinned, pinnedBy);
}

/**
 * Pins an allowed target: its test-host addresses, or a lookup whose every answer is checked.
 * Never throws: a failure while deciding is a denial.
 */
export async function resolveTarget(policy: Policy, target: AllowedTarget, lookup: Lookup, ownListener?: OwnListener): Promise<Decision> {
  try {
    const pinned = policy.testHosts.get(target.host);
    if (pinned !== undefined) return allowed(target, pinned, 'test_host');
    const outcome = await lookup(target.host);
    if (!outcome.ok) {
      return { allowed: false, reason: outcome.reason, detail: outcome.detail, host: target.host, port: target.port };
    }
    return checkAddresses(target, outcome.addresses, ownListener);
  } catch (err) {
    return { allowed: false, reason: 'internal_error', detail: `decision failed: ${(err as Error).message}`, port: target.port };
  }
}

/**
 * Pins a request inside a connection already allowed to its host (an inspected one, whose every
 * request names that host) to the addresses that connection's decision checked, checked again
 * against `policy`, the one in force now: its test hosts first, as resolveTarget does, then every
 * address's class and the proxy's own listeners. No lookup: the name was resolved once for the
 * connection, as for a tunnel, whose bytes go to those addresses for its whole life too. A lookup
 * per request cost a resolver round trip each (two queries) and gained nothing against
 * rebinding, which only ever meets addresses that were checked.
 */
export function repinTarget(policy: Policy, target: AllowedTarget, addresses: readonly string[], ownListener?: OwnListener): Decision {
  const pinned = policy.testHosts.get(target.host);
  if (pinned !== undefined) return allowed(target, pinned, 'test_host');
  return checkAddresses(target, addresses, ownListener, 'connection');
}

/**
 * The whole decision for one tunnel (CONNECT, transparent TLS). Never throws: a failure while
 * deciding is a denial.
 */
export async function decide(policy: Policy, rawHost: string, port: number, lookup: Lookup, ownListener?: OwnListener): Promise<Decision> {
  let target: AllowedTarget | Denial;
  try {
    const checked = checkTarget(policy, rawHost, port);
    target = checked.allowed ? checkTunnel(checked) : checked;
  } catch (err) {
    return { allowed: false, reason: 'internal_error', detail: `decision failed: ${(err as Error).message}`, port };
  }
  return target.allowed ? resolveTarget(policy, target, lookup, ownListener) : target;
}
