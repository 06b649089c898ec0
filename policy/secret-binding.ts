/**
 * The `secrets:` of an allowHosts entry, validated: which secret the proxy puts into requests to
 * the entry's host, in which header and format, and where the egress reads its value. Pure data:
 * no value is read here (proxy/secrets/secret-values.ts loads them), so a policy can be checked
 * anywhere without the secrets at hand.
 */
import { HTTP_TOKEN } from './request-rules.js';

/** Where the egress reads a secret's value: one of its environment variables, or a file (a Kubernetes Secret mount). */
export type SecretSource = { readonly kind: 'env'; readonly variable: string } | { readonly kind: 'file'; readonly path: string };

export interface SecretBinding {
  /** `[A-Z_][A-Z0-9_]*`: the variable the workload gets its placeholder in, and the default variable of the value. */
  readonly name: string;
  /** The header the proxy sets on every request to the host (as written), replacing any the sandbox sent; none: swap only. */
  readonly header?: string | undefined;
  /** The header's value, `{}` standing for the secret (default `{}`). */
  readonly format: string;
  readonly source: SecretSource;
}

/** A secret as the policy file writes it (policy-file.ts's schema). */
export interface SecretEntry {
  readonly name: string;
  readonly header?: string | undefined;
  readonly format?: string | undefined;
  readonly env?: string | undefined;
  readonly file?: string | undefined;
}

/** One binding with where it was written (`allowHosts[3].secrets[0]`) and the host it binds to. */
export interface PlacedBinding {
  readonly path: string;
  readonly host: string;
  readonly binding: SecretBinding;
}

const NAME = /^[A-Z_][A-Z0-9_]*$/;
const VARIABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PRINTABLE = /^[\x20-\x7e]*$/;

/**
 * Fields a secret may never set: the ones that frame or route the request (Host, Content-Length,
 * Transfer-Encoding), hop-by-hop fields (RFC 9110 §7.6.1) that the proxy drops or writes itself,
 * and Proxy-* (for the proxy, never forwarded). Setting one would change how the upstream reads
 * the request, or be dropped silently.
 */
const FORBIDDEN_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'upgrade', 'te', 'trailer', 'keep-alive', 'expect', 'http2-settings']);

/** Whether `header` may carry a secret, or why not. */
function headerProblem(header: string): string | undefined {
  if (!HTTP_TOKEN.test(header)) return `header "${header}" is not an HTTP field name (a token: letters, digits and !#$%&'*+-.^_\`|~)`;
  const lower = header.toLowerCase();
  if (FORBIDDEN_HEADERS.has(lower) || lower.startsWith('proxy-')) {
    return `header ${header} frames or routes the request, or is hop-by-hop, and cannot carry a secret; name the field the upstream reads the credential from (Authorization, X-Api-Key, ...)`;
  }
  return undefined;
}

function formatProblem(format: string): string | undefined {
  if (format.split('{}').length !== 2) return `format ${JSON.stringify(format)} must contain "{}" exactly once (where the secret goes)`;
  if (!PRINTABLE.test(format)) return `format ${JSON.stringify(format)} may hold printable ASCII only`;
  return undefined;
}

/** The source of one secret entry, or why it has none. */
function sourceOf(entry: SecretEntry): SecretSource | string {
  if (entry.env !== undefined && entry.file !== undefined) return 'give env or file, not both: the value comes from one place';
  if (entry.file !== undefined) {
    if (!entry.file.startsWith('/') || entry.file.includes('\0')) return `file ${JSON.stringify(entry.file)} must be an absolute path`;
    return { kind: 'file', path: entry.file };
  }
  const variable = entry.env ?? entry.name;
  if (!VARIABLE.test(variable)) return `env ${JSON.stringify(variable)} is not an environment variable name`;
  return { kind: 'env', variable };
}

export type BindingsParse =
  | { readonly ok: true; readonly bindings: readonly SecretBinding[] }
  | { readonly ok: false; readonly problems: readonly { readonly path: string; readonly message: string }[] };

/**
 * The secrets of one entry, checked. `at` is the entry's path (`allowHosts[3]`); `exact` and
 * `inspect` are the entry's: a secret needs both.
 */
export function parseSecretBindings(entries: readonly SecretEntry[], at: string, exact: boolean, inspect: boolean): BindingsParse {
  if (entries.length === 0) return { ok: true, bindings: [] };
  if (!inspect) {
    const message = 'secrets need inspect: true: the proxy must see inside TLS to put a secret into a request, and a plain-HTTP request would carry it in clear';
    return { ok: false, problems: [{ path: `${at}.secrets`, message }] };
  }
  if (!exact) return { ok: false, problems: [{ path: `${at}.secrets`, message: 'secrets on a wildcard entry: a secret binds to exact names; list each host that gets it' }] };
  const problems: { path: string; message: string }[] = [];
  const bindings: SecretBinding[] = [];
  const names = new Set<string>();
  const headers = new Map<string, string>();
  entries.forEach((entry, j) => {
    const path = `${at}.secrets[${j}]`;
    const problem = (message: string): void => void problems.push({ path, message });
    if (!NAME.test(entry.name)) return problem(`name ${JSON.stringify(entry.name)} must be upper case letters, digits and _ (not starting with a digit)`);
    if (names.has(entry.name)) return problem(`${entry.name} is listed twice in this entry; list it once`);
    names.add(entry.name);
    if (entry.header === undefined && entry.format !== undefined) return problem(`${entry.name} has a format but no header: the format says how the header is written`);
    if (entry.header !== undefined) {
      const bad = headerProblem(entry.header) ?? formatProblem(entry.format ?? '{}');
      if (bad !== undefined) return problem(`${entry.name}: ${bad}`);
      const earlier = headers.get(entry.header.toLowerCase());
      if (earlier !== undefined) return problem(`${entry.name} sets header ${entry.header}, which ${earlier} sets already; one header carries one secret`);
      headers.set(entry.header.toLowerCase(), entry.name);
    }
    const source = sourceOf(entry);
    if (typeof source === 'string') return problem(`${entry.name}: ${source}`);
    bindings.push(Object.freeze({ name: entry.name, header: entry.header, format: entry.format ?? '{}', source: Object.freeze(source) }));
  });
  return problems.length > 0 ? { ok: false, problems } : { ok: true, bindings: Object.freeze(bindings) };
}

function sameSource(a: SecretSource, b: SecretSource): boolean {
  return a.kind === 'env' ? b.kind === 'env' && a.variable === b.variable : b.kind === 'file' && a.path === b.path;
}

/** One name bound on several entries must read its value from one place: else which value is the secret? */
export function sourceConflicts(placed: readonly PlacedBinding[]): { readonly path: string; readonly message: string }[] {
  const first = new Map<string, PlacedBinding>();
  const problems: { path: string; message: string }[] = [];
  for (const p of placed) {
    const earlier = first.get(p.binding.name);
    if (earlier === undefined) first.set(p.binding.name, p);
    else if (!sameSource(earlier.binding.source, p.binding.source)) {
      problems.push({ path: p.path, message: `${p.binding.name} reads its value from another place than at ${earlier.path}; one secret has one source` });
    }
  }
  return problems;
}
