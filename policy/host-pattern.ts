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
import { isPublicSuffix } from './public-suffix.js';

export type TunnelMode = 'tls' | 'opaque';

export interface HostPattern {
  readonly kind: 'exact' | 'suffix';
  /** The normalised name, without `*.`. */
  readonly name: string;
  /** The entry as matched and logged: the name, or `*.` and the name. */
  readonly entry: string;
  readonly tunnel: TunnelMode;
}

export type PatternParse =
  | { readonly ok: true; readonly pattern: HostPattern }
  | { readonly ok: false; readonly problem: string };

/**
 * Validates one allowlist entry with the same rules as a requested host, and refuses a wildcard
 * over a public suffix (`*.com`, `*.co.uk`): it would allow every domain registered below it.
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
  if (wildcard && isPublicSuffix(parsed.name)) {
    return {
      ok: false,
      problem: `"${parsed.name}" is a public suffix (Public Suffix List), so "*.${parsed.name}" would allow every domain registered under it; list the domains themselves ("*.example.${parsed.name}")`,
    };
  }
  const kind = wildcard ? 'suffix' : 'exact';
  return { ok: true, pattern: { kind, name: parsed.name, entry: wildcard ? `*.${parsed.name}` : parsed.name, tunnel } };
}

export interface Allowlist {
  readonly size: number;
  /** The entry that allows the normalised name, or undefined. An exact entry wins over a wildcard, a deeper wildcard over a shallower one. */
  match(name: string): HostPattern | undefined;
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
  return {
    size: exact.size + suffix.size,
    match(name: string): HostPattern | undefined {
      const hit = exact.get(name);
      if (hit !== undefined) return hit;
      if (suffix.size === 0) return undefined;
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
    },
  };
}
