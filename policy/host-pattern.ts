/**
 * Allowlist entries and matching. `example.com` matches exactly that name; `*.example.com`
 * matches any name below it at any depth, never `example.com` itself. Matching is by label
 * boundary (`evilexample.com` is not below `example.com`) and costs one hash lookup per label of
 * the requested name, whatever the size of the list.
 *
 * Each entry also says what a tunnel to its hosts may carry: `tls` (a TLS ClientHello naming the
 * CONNECT host must come first) or `opaque` (any bytes: SSH on 443, plain WebSocket, ...).
 */
import { parseHostName } from './host-name.js';
import { publicSuffixSection, suffixBelow, type SuffixSection } from './public-suffix.js';
import type { RequestRules } from './request-rules.js';
import type { SecretBinding } from './secret-binding.js';

export type TunnelMode = 'tls' | 'opaque';

export interface HostPattern {
  readonly kind: 'exact' | 'suffix';
  /** The normalised name, without `*.`. */
  readonly name: string;
  /** The entry as matched and logged: the name, or `*.` and the name. */
  readonly entry: string;
  readonly tunnel: TunnelMode;
  /** The entry's method and path rules, if it has any (it then allows plain HTTP only, unless inspected). */
  readonly rules?: RequestRules | undefined;
  /** The proxy terminates TLS to these hosts and reads each request (proxy/inspect/). */
  readonly inspect?: true | undefined;
  /** The secrets the proxy puts into requests to this host (an exact, inspected entry only). */
  readonly secrets?: readonly SecretBinding[] | undefined;
}

export type PatternParse =
  | { readonly ok: true; readonly pattern: HostPattern }
  | { readonly ok: false; readonly problem: string };

/**
 * Validates one allowlist entry with the same rules as a requested host, and refuses a wildcard
 * over a public suffix, ICANN (`*.com`, `*.co.uk`) or private (`*.github.io`, `*.ngrok.io`): it
 * would allow every name registered below it, by whoever registered it. A wildcard one label
 * further down (`*.example.co.uk`, `*.example.github.io`) has one owner and is fine. An exact
 * entry that is a suffix (`github.io`) names one host, whose owner runs the suffix, and is fine too.
 */
export function parseHostPattern(entry: string, tunnel: TunnelMode = 'tls'): PatternParse {
  const wildcard = entry.startsWith('*.');
  const parsed = parseHostName(wildcard ? entry.slice(2) : entry);
  if (!parsed.ok) {
    const problem =
      parsed.reason === 'ip_literal'
        ? 'IP literals cannot be allowed; list host names'
        : `${parsed.detail}${entry.includes('*') && !wildcard ? ' (a wildcard is only allowed as a leading "*.")' : ''}`;
    return { ok: false, problem };
  }
  const section = wildcard ? publicSuffixSection(parsed.name) : undefined;
  if (section !== undefined) return { ok: false, problem: wildcardOverSuffix(parsed.name, section) };
  const kind = wildcard ? 'suffix' : 'exact';
  return { ok: true, pattern: { kind, name: parsed.name, entry: wildcard ? `*.${parsed.name}` : parsed.name, tunnel } };
}

const SECTION_SAYS: Record<SuffixSection, string> = {
  icann: 'Public Suffix List, ICANN section: anyone may register a domain below it',
  implicit: 'a top-level label the Public Suffix List does not know counts as one',
  private: 'Public Suffix List, private section: its operator hands out the names below it, often to anyone who signs up',
};

/** The entry, the suffix, why, and what to write instead: the exact names (or, below an ICANN suffix, one domain's wildcard). */
function wildcardOverSuffix(suffix: string, section: SuffixSection): string {
  const instead =
    section === 'private'
      ? `list the exact host names instead ("example.${suffix}")`
      : `list the exact host names instead ("www.example.${suffix}"), or a wildcard below one domain ("*.example.${suffix}")`;
  return `"${suffix}" is a public suffix (${SECTION_SAYS[section]}), so "*.${suffix}" would allow every name registered under it; ${instead}`;
}

export interface Allowlist {
  readonly size: number;
  /** The entry that allows the normalised name, or undefined. An exact entry wins over a wildcard, a deeper wildcard over a shallower one. */
  match(name: string): HostPattern | undefined;
  /**
   * For a name `match` refused: the wildcard entry it would have matched and the public suffix
   * between them that the wildcard does not reach across, for the refusal's detail.
   */
  crossing(name: string): { readonly entry: string; readonly suffix: string } | undefined;
  /**
   * Whether an allowed name lies below the normalised `name` (`github.com` under an entry
   * `api.github.com`, `example.com` under `*.example.com`): a name that exists in the allowlist's
   * view of the DNS tree without being allowed itself.
   */
  hasNamesBelow(name: string): boolean;
}

/** `name`'s proper parents: a.b.example.com → b.example.com, example.com, com. */
function* parentsOf(name: string): Generator<string> {
  for (let dot = name.indexOf('.'); dot !== -1; dot = name.indexOf('.', dot + 1)) yield name.slice(dot + 1);
}

/**
 * The public suffix strictly between `name` and a wildcard's parent, if any: `*.amazonaws.com`
 * loads (one company's domain) but must not match `bucket.s3.amazonaws.com`, a name below the
 * private suffix `s3.amazonaws.com` that the bucket's owner controls, whoever that is. A name that
 * is itself the suffix (`s3.amazonaws.com`) is the suffix operator's own host and matches.
 */
function suffixCrossed(name: string, parent: string): string | undefined {
  const suffix = suffixBelow(name);
  return suffix !== undefined && suffix.length > parent.length && suffix.endsWith(`.${parent}`) ? suffix : undefined;
}

export function compileAllowlist(patterns: readonly HostPattern[]): Allowlist {
  const exact = new Map<string, HostPattern>();
  const suffix = new Map<string, HostPattern>();
  // Label counts that occur among wildcard parents: only parents of those depths are looked up,
  // which keeps a miss to one or two hash lookups on real lists.
  const depths: boolean[] = [];
  for (const p of patterns) {
    if (p.kind === 'exact') exact.set(p.name, p);
    else {
      suffix.set(p.name, p);
      depths[p.name.split('.').length] = true;
    }
  }
  /** The deepest wildcard entry over `name`. */
  const wildcardOver = (name: string): HostPattern | undefined => {
    let labels = 1;
    for (let i = name.indexOf('.'); i !== -1; i = name.indexOf('.', i + 1)) labels += 1;
    // Try each proper parent: a.b.example.com → b.example.com → example.com → com.
    for (let dot = name.indexOf('.'); dot !== -1; dot = name.indexOf('.', dot + 1)) {
      labels -= 1;
      if (depths[labels] !== true) continue;
      const entry = suffix.get(name.slice(dot + 1));
      if (entry !== undefined) return entry;
    }
    return undefined;
  };
  // Built on first use (only transparent mode's DNS answers ask): the names above the entries.
  let above: Set<string> | undefined;
  const namesAbove = (): Set<string> => {
    if (above !== undefined) return above;
    above = new Set<string>();
    for (const p of patterns) {
      // A wildcard's parent has the wildcard's names below it; an exact name, only its parents.
      if (p.kind !== 'exact') above.add(p.name);
      for (const parent of parentsOf(p.name)) above.add(parent);
    }
    return above;
  };
  return {
    size: exact.size + suffix.size,
    hasNamesBelow: (name: string) => namesAbove().has(name),
    match(name: string): HostPattern | undefined {
      const hit = exact.get(name);
      if (hit !== undefined) return hit;
      if (suffix.size === 0) return undefined;
      const entry = wildcardOver(name);
      // A shallower wildcard would cross the same suffix: none matches.
      return entry === undefined || suffixCrossed(name, entry.name) !== undefined ? undefined : entry;
    },
    crossing(name: string) {
      if (exact.has(name) || suffix.size === 0) return undefined;
      const entry = wildcardOver(name);
      const crossed = entry === undefined ? undefined : suffixCrossed(name, entry.name);
      return entry === undefined || crossed === undefined ? undefined : { entry: entry.entry, suffix: crossed };
    },
  };
}
