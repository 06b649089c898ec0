/**
 * Allowlist entries and matching. `example.com` matches exactly that name; `*.example.com`
 * matches any name below it at any depth, never `example.com` itself. Matching is by label
 * boundary (`evilexample.com` is not below `example.com`) and costs one hash lookup per label of
 * the requested name, whatever the size of the list.
 */
import { parseHostName } from './host-name.js';

export type HostPattern =
  | { readonly kind: 'exact'; readonly name: string; readonly entry: string }
  | { readonly kind: 'suffix'; readonly name: string; readonly entry: string };

export type PatternParse =
  | { readonly ok: true; readonly pattern: HostPattern }
  | { readonly ok: false; readonly problem: string };

/** Validates one allowlist entry with the same rules as a requested host. */
export function parseHostPattern(entry: string): PatternParse {
  const wildcard = entry.startsWith('*.');
  const parsed = parseHostName(wildcard ? entry.slice(2) : entry);
  if (!parsed.ok) {
    const problem =
      parsed.reason === 'ip_literal'
        ? 'IP literals cannot be allowed; list host names'
        : `${parsed.detail}${entry.includes('*') && !wildcard ? ' (a wildcard is only allowed as a leading "*.")' : ''}`;
    return { ok: false, problem };
  }
  return {
    ok: true,
    pattern: { kind: wildcard ? 'suffix' : 'exact', name: parsed.name, entry: wildcard ? `*.${parsed.name}` : parsed.name },
  };
}

export interface Allowlist {
  readonly size: number;
  /** The entry that allows the normalised name, or undefined. */
  match(name: string): string | undefined;
}

export function compileAllowlist(patterns: readonly HostPattern[]): Allowlist {
  const exact = new Map<string, string>();
  const suffix = new Map<string, string>();
  // Label counts that occur among wildcard parents: only parents of those depths are looked up,
  // which keeps a miss to one or two hash lookups on real lists.
  const depths: boolean[] = [];
  for (const p of patterns) {
    if (p.kind === 'exact') exact.set(p.name, p.entry);
    else {
      suffix.set(p.name, p.entry);
      depths[p.name.split('.').length] = true;
    }
  }
  return {
    size: exact.size + suffix.size,
    match(name: string): string | undefined {
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
