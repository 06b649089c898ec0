/**
 * Method and path rules of an allowlist entry (`methods: [GET, HEAD]`, `paths: ["/repos/org/*"]`):
 * parsed once when the policy loads, and checked for each plain-HTTP request to the entry's hosts.
 * Pure.
 *
 * The proxy can check them only where it reads the request: plain HTTP (absolute-form through the
 * proxy, or by Host on a transparent HTTP listener). A tunnel would carry requests past them, so
 * an entry with rules allows no tunnel (decision.ts).
 */
import { normaliseRequestPath } from './request-path.js';

/** One `paths` entry: an exact path, or a prefix of whole segments (written with a final `/*`). */
export interface PathRule {
  readonly kind: 'exact' | 'prefix';
  /** The path as written in the policy. */
  readonly written: string;
  /** The exact path, or the prefix without its `*` (ending in `/`). */
  readonly value: string;
}

export interface RequestRules {
  /** The methods allowed, or undefined for any. */
  readonly methods: ReadonlySet<string> | undefined;
  /** The paths allowed, or undefined for any. */
  readonly paths: readonly PathRule[] | undefined;
}

export type RulesParse =
  | { readonly ok: true; readonly rules: RequestRules | undefined }
  | { readonly ok: false; readonly problems: readonly { readonly path: string; readonly message: string }[] };

/** RFC 9110 §5.6.2 token: the grammar of a method (§9.1) and of a field name (§5.1). */
export const HTTP_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** What is wrong with a method as written, or undefined. */
function methodProblem(method: string): string | undefined {
  if (!HTTP_TOKEN.test(method)) return `"${method}" is not an HTTP method (a token: letters, digits and !#$%&'*+-.^_\`|~)`;
  if (method !== method.toUpperCase()) return `"${method}": methods are case-sensitive (RFC 9110 §9.1) and clients send them in upper case; write "${method.toUpperCase()}"`;
  if (method === 'CONNECT') {
    return '"CONNECT" cannot be allowed by a rule: the proxy cannot see the requests inside a tunnel, so an entry with methods or paths allows no tunnel; list the host in an entry without rules to allow tunnels';
  }
  return undefined;
}

/** A `paths` entry, or what is wrong with it. */
function parsePathRule(written: string): PathRule | string {
  if (!written.startsWith('/')) return `"${written}": a path starts with "/"`;
  if (/[?#]/.test(written)) return `"${written}": only the path is matched, never the query or a fragment; write the path alone`;
  const star = written.indexOf('*');
  if (star !== -1 && star !== written.length - 1) return `"${written}": "*" may only end a path, once (a prefix: "/repos/org/*")`;
  if (star !== -1 && !written.endsWith('/*')) {
    const base = written.slice(0, -1);
    return `"${written}": a prefix is whole segments and ends in "/*": write "${base}/*" (below ${base}/), and "${base}" too if it is allowed itself ("${written}" would also match "${base}-other")`;
  }
  const value = star === -1 ? written : written.slice(0, -1);
  const normal = normaliseRequestPath(value);
  if (!normal.ok) return `"${written}": ${normal.problem}`;
  // Each path has one spelling, the one requests are compared in: no needless escapes.
  if (normal.path !== value) return `"${written}": write "${normal.path}${star === -1 ? '' : '*'}" (escapes of letters, digits and -._~ are decoded, the others in upper case)`;
  return { kind: star === -1 ? 'exact' : 'prefix', written, value };
}

function duplicate<T>(list: readonly T[], i: number): boolean {
  return list.indexOf(list[i]!) !== i;
}

/**
 * Parses an entry's `methods` and `paths` (either may be absent). Problems carry their path below
 * the entry (`methods[1]`); undefined rules when the entry has none.
 */
export function parseRequestRules(methods: readonly string[] | undefined, paths: readonly string[] | undefined): RulesParse {
  const problems: { path: string; message: string }[] = [];
  if (methods?.length === 0) problems.push({ path: 'methods', message: 'an empty list allows nothing; leave methods out to allow every method' });
  if (paths?.length === 0) problems.push({ path: 'paths', message: 'an empty list allows nothing; leave paths out to allow every path ("/*" allows every path spelled plainly)' });
  methods?.forEach((method, i) => {
    const problem = methodProblem(method) ?? (duplicate(methods, i) ? `"${method}" is listed twice` : undefined);
    if (problem !== undefined) problems.push({ path: `methods[${i}]`, message: problem });
  });
  const rules: PathRule[] = [];
  paths?.forEach((path, i) => {
    const rule = parsePathRule(path);
    if (typeof rule === 'string') problems.push({ path: `paths[${i}]`, message: rule });
    else if (rules.some((r) => r.written === rule.written)) problems.push({ path: `paths[${i}]`, message: `"${path}" is listed twice` });
    else rules.push(rule);
  });
  if (problems.length > 0) return { ok: false, problems };
  if (methods === undefined && paths === undefined) return { ok: true, rules: undefined };
  return { ok: true, rules: Object.freeze({ methods: methods === undefined ? undefined : new Set(methods), paths: paths === undefined ? undefined : Object.freeze(rules) }) };
}

/** The rules as one line, at most `maxPaths` paths named: for a refusal's detail, and whole for `check`'s report. */
export function describeRules(rules: RequestRules, maxPaths = 5): string {
  const parts: string[] = [];
  if (rules.methods !== undefined) parts.push(`methods ${[...rules.methods].join(', ')}`);
  if (rules.paths !== undefined) {
    const shown = rules.paths.slice(0, maxPaths).map((p) => p.written);
    parts.push(`paths ${shown.join(', ')}${rules.paths.length > shown.length ? ` and ${rules.paths.length - shown.length} more` : ''}`);
  }
  return parts.join('; ');
}

export type RulesVerdict =
  | {
      readonly ok: true;
      /** The request target to forward: the normal form of the path and the query as sent, or the target as sent when no path rule applies. */
      readonly target: string;
    }
  | { readonly ok: false; readonly reason: 'method_not_allowed' | 'path_not_allowed'; readonly detail: string };

/**
 * Headers by which many frameworks let a request name another method than its own (Express's
 * method-override, Symfony, ASP.NET, Google APIs): a GET carrying `X-HTTP-Method-Override: DELETE`
 * is a DELETE to them. Under method rules each one must name an allowed method too.
 */
const METHOD_OVERRIDES = new Set(['x-http-method-override', 'x-http-method', 'x-method-override']);

/**
 * Methods a refusal may name back. An override header's value is the client's own text: anything
 * else is not quoted, since a placeholder the screening did not see (it compares case by case,
 * and the value is upper-cased here) must not reach a detail, a line or an answer.
 */
const NAMED_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH', 'PROPFIND', 'PROPPATCH', 'MKCOL', 'COPY', 'MOVE', 'LOCK', 'UNLOCK', 'SEARCH', 'QUERY', 'PURGE']);

/** The first method-override header in a raw name/value list that names a method not in `methods`. */
function overrideRefused(methods: ReadonlySet<string>, rawHeaders: readonly string[]): { name: string; method: string } | undefined {
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (!METHOD_OVERRIDES.has(name.toLowerCase())) continue;
    // Frameworks read the value upper-cased and trimmed.
    const method = rawHeaders[i + 1]!.trim().toUpperCase();
    if (!methods.has(method)) return { name, method: method === '' ? 'an empty method' : NAMED_METHODS.has(method) ? method : 'a method it does not name here' };
  }
  return undefined;
}

/** Longest request path quoted back in a detail. */
const QUOTED_PATH_MAX = 96;

function quoted(target: string): string {
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  return path.length > QUOTED_PATH_MAX ? `${path.slice(0, QUOTED_PATH_MAX)}...` : path;
}

/**
 * A plain-HTTP request (`method`, `target` in origin-form, and its raw header list) against the
 * rules of the entry `entry` (as written, for the detail): the method first (and any method an
 * override header names), then the path, which is normalised strictly (request-path.ts) and
 * compared in that form only.
 */
export function checkRules(rules: RequestRules, entry: string, method: string, target: string, rawHeaders: readonly string[]): RulesVerdict {
  if (rules.methods !== undefined) {
    if (!rules.methods.has(method)) {
      return { ok: false, reason: 'method_not_allowed', detail: `${method} is not allowed by the allowHosts entry ${entry} (${describeRules(rules)})` };
    }
    const override = overrideRefused(rules.methods, rawHeaders);
    if (override !== undefined) {
      const detail = `the ${override.name} header asks the server for ${override.method}, which is not allowed by the allowHosts entry ${entry} (${describeRules(rules)})`;
      return { ok: false, reason: 'method_not_allowed', detail };
    }
  }
  if (rules.paths === undefined) return { ok: true, target };
  const normal = normaliseRequestPath(target);
  if (!normal.ok) {
    return { ok: false, reason: 'path_not_allowed', detail: `the path ${quoted(target)} has ${normal.problem}; the allowHosts entry ${entry} has path rules, so such paths are refused` };
  }
  const { path } = normal;
  const match = rules.paths.some((r) => (r.kind === 'exact' ? path === r.value : path.startsWith(r.value)));
  if (!match) return { ok: false, reason: 'path_not_allowed', detail: `${quoted(path)} is not allowed by the allowHosts entry ${entry} (${describeRules(rules)})` };
  return { ok: true, target: `${path}${normal.query}` };
}
