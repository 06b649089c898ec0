/**
 * The egress policy: what may be reached. Built once from a validated source (a policy file, or
 * the environment of the egress image), then frozen and shared by every request.
 */
import type Ipaddr from 'ipaddr.js';
import { requireCjs } from '../common/index.js';
import { compileAllowlist, parseHostPattern, type Allowlist, type HostPattern, type TunnelMode } from './host-pattern.js';
import { parseHostName } from './host-name.js';
import { parseRequestRules, type RequestRules } from './request-rules.js';
import { parseSecretBindings, sourceConflicts, type PlacedBinding, type SecretEntry } from './secret-binding.js';
import type { SecretSet } from './secrets.js';

const ipaddr = requireCjs('ipaddr.js') as typeof Ipaddr;

export interface Policy {
  /** The allowlist entries as written, normalised. */
  readonly allowHosts: readonly string[];
  /** The method and path rules of the entries that have them, by entry. */
  readonly entryRules: ReadonlyMap<string, RequestRules>;
  /** The entries whose TLS the proxy terminates (`inspect: true`); a policy with any needs the deployment CA. */
  readonly inspected: readonly string[];
  readonly allowlist: Allowlist;
  readonly connectPorts: ReadonlySet<number>;
  /**
   * Names pinned to addresses by tests (CAPYBARA_EGRESS_TEST_HOSTS): they skip DNS and the
   * private-address check, and must still be on the allowlist.
   */
  readonly testHosts: ReadonlyMap<string, readonly string[]>;
  /** What a refusal of a host off the allowlist tells the client to do, instead of the catalog's advice. */
  readonly refusalHint: string | undefined;
  /**
   * `enforce` refuses what the allowlist and the ports do not allow; `report` allows it and marks
   * its decision `would_deny` (learning an allowlist). Host syntax, IP literals and non-public
   * addresses are refused in both.
   */
  readonly mode: PolicyMode;
  /** The tunnel mode of a host allowed only by report mode (the entries' default). */
  readonly tunnelDefault: TunnelMode;
  /** Every secret binding, where it was written: what the loader reads values for (proxy/secrets/). */
  readonly secretBindings: readonly PlacedBinding[];
  /** The loaded values and placeholders (attached by proxy/secrets/secret-values.ts); none when no secret is bound. */
  readonly secrets?: SecretSet | undefined;
}

export const POLICY_MODES = ['enforce', 'report'] as const;
export type PolicyMode = (typeof POLICY_MODES)[number];

export const DEFAULT_CONNECT_PORTS: readonly number[] = [443, 80];

/** An allowlist entry: a host pattern, or one with its tunnel mode or its method and path rules spelled out. */
export type AllowEntry =
  | string
  | {
      readonly host: string;
      readonly tunnel?: TunnelMode | undefined;
      readonly methods?: readonly string[] | undefined;
      readonly paths?: readonly string[] | undefined;
      readonly inspect?: boolean | undefined;
      readonly secrets?: readonly SecretEntry[] | undefined;
    };

export interface PolicyInput {
  readonly allowHosts: readonly AllowEntry[];
  /** The tunnel mode of entries that do not name one (default `tls`). */
  readonly tunnelDefault?: TunnelMode;
  /** Refuse `opaque` entries (the operator's `--require-sni true`), so every tunnel carries TLS. */
  readonly requireTls?: boolean;
  readonly connectPorts?: readonly number[];
  readonly testHosts?: Readonly<Record<string, string | readonly string[]>>;
  /**
   * The advice of a `host_not_allowed` refusal, where the catalog's ("add the host name to
   * allowHosts") is not what its reader can do: in a sandbox the controller made, the allowlist is
   * the controller's. Validated by the caller (it goes into a response body).
   */
  readonly refusalHint?: string | undefined;
  /** Default `enforce`. */
  readonly mode?: PolicyMode | undefined;
}

/** One problem with a policy source: where it is and what is wrong. */
export interface PolicyProblem {
  readonly path: string;
  readonly message: string;
}

export type PolicyBuild =
  | { readonly ok: true; readonly policy: Policy }
  | { readonly ok: false; readonly problems: readonly PolicyProblem[] };

/**
 * What a URL, a host:port or a host/path written as an entry should have been, with the hint; an
 * entry is a host name alone.
 */
function notAHostName(entry: string): string | undefined {
  const url = /^[a-z][a-z0-9+.-]*:\/\/([^/:?#]*)/i.exec(entry);
  if (url !== null) return `host names only, without a scheme, port or path: write "${url[1] ?? ''}" (ports go in connectPorts)`;
  const port = /^([^/:]+):\d+$/.exec(entry);
  if (port !== null) return `host names only; ports go in connectPorts: write "${port[1] ?? ''}"`;
  const path = /^([^/:]+)\//.exec(entry);
  if (path !== null) return `host names only, without a path: write "${path[1] ?? ''}"`;
  return undefined;
}

/**
 * Why a parsed entry cannot join the allowlist (after its quoted name), given the entry of the same
 * name before it, if any: one name has one tunnel mode and one set of rules, never two to choose from.
 */
function entryProblem(pattern: HostPattern, earlier: HostPattern | undefined, requireTls: boolean): string | undefined {
  if (pattern.tunnel === 'opaque' && requireTls) return ': an opaque tunnel is refused because TLS is required for every tunnel (--require-sni true)';
  if (earlier === undefined) return undefined;
  if (earlier.rules !== undefined || pattern.rules !== undefined) return ' is listed again, and one of the two has methods or paths; list it once, with all of its rules';
  if (earlier.secrets !== undefined || pattern.secrets !== undefined) return ' is listed again, and one of the two has secrets; list it once, with all of its secrets';
  if (earlier.inspect !== pattern.inspect) return ' is listed again, and only one of the two is inspected; list it once';
  if (earlier.tunnel !== pattern.tunnel) return ` is listed again with tunnel ${pattern.tunnel} (before: ${earlier.tunnel}); list it once`;
  return undefined;
}

export function buildPolicy(input: PolicyInput): PolicyBuild {
  const problems: PolicyProblem[] = [];
  const patterns: HostPattern[] = [];
  const seen = new Map<string, HostPattern>();
  const placed: PlacedBinding[] = [];
  input.allowHosts.forEach((item, i) => {
    const entry = typeof item === 'string' ? item : item.host;
    const tunnel = (typeof item === 'string' ? undefined : item.tunnel) ?? input.tunnelDefault ?? 'tls';
    const parsed = parseHostPattern(entry.trim(), tunnel);
    if (!parsed.ok) {
      problems.push({ path: `allowHosts[${i}]`, message: `"${entry}": ${notAHostName(entry.trim()) ?? parsed.problem}` });
      return;
    }
    const rules = typeof item === 'string' ? { ok: true as const, rules: undefined } : parseRequestRules(item.methods, item.paths);
    if (!rules.ok) {
      for (const p of rules.problems) problems.push({ path: `allowHosts[${i}].${p.path}`, message: p.message });
      return;
    }
    const inspect = typeof item !== 'string' && item.inspect === true;
    const secrets = parseSecretBindings(typeof item === 'string' ? [] : item.secrets ?? [], `allowHosts[${i}]`, parsed.pattern.kind === 'exact', inspect);
    if (!secrets.ok) {
      problems.push(...secrets.problems);
      return;
    }
    // An entry with rules allows no tunnel unless inspected (decision.ts), and an inspected entry is
    // TLS the proxy terminates: a tunnel mode, the default's included, means nothing for either.
    const bound = secrets.bindings.length > 0 ? secrets.bindings : undefined;
    const pattern =
      rules.rules === undefined && !inspect
        ? parsed.pattern
        : { ...parsed.pattern, tunnel: 'tls' as const, rules: rules.rules, inspect: inspect ? (true as const) : undefined, secrets: bound };
    const opaque = typeof item !== 'string' && item.tunnel === 'opaque';
    const problem = opaque && inspect
      ? ': an inspected entry is TLS that the proxy terminates and reads, so tunnel: opaque means nothing here; drop one'
      : opaque && rules.rules !== undefined
      ? ': an entry with methods or paths allows no tunnel (the proxy checks them in plain HTTP only), so tunnel: opaque means nothing here; drop one'
      : entryProblem(pattern, seen.get(pattern.entry), input.requireTls === true);
    if (problem !== undefined) {
      problems.push({ path: `allowHosts[${i}]`, message: `"${entry}"${problem}` });
      return;
    }
    seen.set(pattern.entry, pattern);
    patterns.push(pattern);
    for (const [j, binding] of secrets.bindings.entries()) placed.push({ path: `allowHosts[${i}].secrets[${j}]`, host: pattern.name, binding });
  });
  problems.push(...sourceConflicts(placed));

  const ports = input.connectPorts ?? DEFAULT_CONNECT_PORTS;
  ports.forEach((port, i) => {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      problems.push({ path: `connectPorts[${i}]`, message: `${String(port)} is not a port (1-65535)` });
    }
  });

  const testHosts = new Map<string, readonly string[]>();
  for (const [host, value] of Object.entries(input.testHosts ?? {})) {
    const name = parseHostName(host);
    const addresses = typeof value === 'string' ? [value] : [...value];
    if (!name.ok) {
      problems.push({ path: `testHosts.${host}`, message: `not a host name: ${name.detail}` });
      continue;
    }
    const bad = addresses.find((a) => !ipaddr.isValid(a));
    if (addresses.length === 0 || bad !== undefined) {
      problems.push({ path: `testHosts.${host}`, message: `"${bad ?? ''}" is not an IP address` });
      continue;
    }
    testHosts.set(name.name, addresses.map((a) => ipaddr.parse(a).toString()));
  }

  if (problems.length > 0) return { ok: false, problems };
  const policy: Policy = {
    allowHosts: Object.freeze(patterns.map((p) => p.entry)),
    entryRules: new Map(patterns.flatMap((p) => (p.rules === undefined ? [] : [[p.entry, p.rules] as const]))),
    inspected: Object.freeze(patterns.flatMap((p) => (p.inspect ? [p.entry] : []))),
    allowlist: compileAllowlist(patterns),
    connectPorts: new Set(ports),
    testHosts,
    refusalHint: input.refusalHint,
    mode: input.mode ?? 'enforce',
    tunnelDefault: input.tunnelDefault ?? 'tls',
    secretBindings: Object.freeze(placed),
  };
  return { ok: true, policy: Object.freeze(policy) };
}
