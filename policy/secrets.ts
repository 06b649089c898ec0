/**
 * Secrets the sandbox never holds. The workload is given a placeholder; the proxy puts the real
 * value into requests to the hosts the secret is bound to, inside inspected TLS only, and refuses
 * (`secret_wrong_host`) any request that carries a placeholder anywhere else: to another host, in
 * the URL, over plain HTTP. Pure: the values are loaded by proxy/secrets/secret-values.ts, and the
 * body is scanned by proxy/secrets/placeholder-scanner.ts.
 *
 * A refusal and a line name a secret by its name and fingerprint (`sha256:` + 12 hex of the
 * value), never by its value or its placeholder.
 */
import type { SecretBinding } from './secret-binding.js';

export interface LoadedSecret {
  readonly name: string;
  readonly value: string;
  /** What the workload holds instead (EGRESS_PLACEHOLDER_<name>); none for a secret only set as a header. */
  readonly placeholder: string | undefined;
  /** `sha256:` and the first 12 hex digits of the value's digest: what logs name it by. */
  readonly fingerprint: string;
}

export interface SecretSet {
  readonly byName: ReadonlyMap<string, LoadedSecret>;
  /** The secrets that have a placeholder, longest placeholder first. */
  readonly placeholders: readonly LoadedSecret[];
  /** Length of the longest placeholder (a body scanner keeps one less across chunks). */
  readonly longestPlaceholder: number;
}

export function createSecretSet(secrets: readonly LoadedSecret[]): SecretSet {
  const placeholders = secrets.filter((s) => s.placeholder !== undefined).sort((a, b) => b.placeholder!.length - a.placeholder!.length);
  return Object.freeze({
    byName: new Map(secrets.map((s) => [s.name, Object.freeze({ ...s })])),
    placeholders: Object.freeze(placeholders),
    longestPlaceholder: placeholders[0]?.placeholder?.length ?? 0,
  });
}

/** How a line names a secret: its name and fingerprint. */
export function secretLabel(secret: LoadedSecret): string {
  return `${secret.name} ${secret.fingerprint}`;
}

export interface SecretRefusal {
  readonly ok: false;
  readonly reason: 'secret_wrong_host';
  readonly detail: string;
  /** The secrets whose placeholders were found, as `NAME sha256:...`. */
  readonly secrets: readonly string[];
}

export type SecretsApplied =
  | {
      readonly ok: true;
      /** The request's fields (flat name/value list), with the secrets put in: to forward, and never to quote. */
      readonly headers: readonly string[];
      /**
       * The same fields as the proxy's own checks must read them (method and path rules, whose
       * refusals quote a header's value): each value a secret went into reads `(secret)`.
       */
      readonly screened: readonly string[];
      /** The secrets whose values went in, as `NAME sha256:...`. */
      readonly injected: readonly string[];
    }
  | SecretRefusal;

/** Where a request goes: its host and the secrets of the entry that allowed it (AllowedTarget fits). */
export interface SecretTarget {
  readonly host: string;
  readonly secrets?: readonly SecretBinding[] | undefined;
}

export interface SecretRequest {
  /** The request target as sent (origin-form or absolute URL). */
  readonly target: string;
  /** The request's fields as a flat name/value list (Node's rawHeaders). */
  readonly headers: readonly string[];
  /** Inside an inspected TLS connection: the only place a secret is put in. */
  readonly inspected: boolean;
}

/** Rounds of percent-decoding: `%2547` is `%47` is `G`; a server may decode more than once. */
const DECODE_ROUNDS = 3;

function percentDecoded(text: string): string {
  let out = text;
  for (let i = 0; i < DECODE_ROUNDS && out.includes('%'); i += 1) {
    const next = out.replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    if (next === out) break;
    out = next;
  }
  return out;
}

const BASIC = /^\s*basic\s+([A-Za-z0-9+/_=-]+)\s*$/i;

/** The credentials of a `Basic` value, decoded as leniently as servers do (padding, url alphabet); else undefined. */
function basicDecoded(value: string): string | undefined {
  const m = BASIC.exec(value);
  return m === null ? undefined : Buffer.from(m[1]!, 'base64').toString('latin1');
}

/** Every form of a text a server might read a placeholder in: raw, percent-decoded and, for a header, Basic-decoded. */
function readings(text: string, header: boolean): string[] {
  const forms = [text, percentDecoded(text)];
  const basic = header ? basicDecoded(text) : undefined;
  if (basic !== undefined) forms.push(basic, percentDecoded(basic));
  return forms;
}

function found(set: SecretSet, forms: readonly string[]): LoadedSecret[] {
  return set.placeholders.filter((s) => forms.some((f) => f.includes(s.placeholder!)));
}

/**
 * The detail goes to the workload (the refusal's body and status line) and names each secret by
 * name alone; the line's `secrets` field has the fingerprints. A fingerprint is an unsalted digest
 * of the value: a workload that had it could test guesses offline (a password falls to a dictionary).
 */
function refusal(secrets: readonly LoadedSecret[], where: string): SecretRefusal {
  const names = secrets.map((s) => s.name);
  const which = secrets.length === 1 ? `the placeholder of secret ${names[0]!}` : `the placeholders of secrets ${names.join(', ')}`;
  return { ok: false, reason: 'secret_wrong_host', detail: `${which} ${where}`, secrets: secrets.map(secretLabel) };
}

/**
 * The request target checked alone, before the host is known (forward.ts, ahead of any detail
 * that quotes the URL or the host): a placeholder in the URL, raw or percent-encoded, is refused
 * for every host, and so is one in the Host header (a wildcard entry would otherwise carry it in
 * a name, and every log line with it).
 */
export function screenTarget(set: SecretSet | undefined, target: string, headers: readonly string[]): SecretRefusal | undefined {
  if (set === undefined || set.placeholders.length === 0) return undefined;
  const inUrl = found(set, readings(target, false));
  if (inUrl.length > 0) return refusal(inUrl, 'is in the request URL; a placeholder goes only in headers');
  for (let i = 0; i < headers.length; i += 2) {
    if (headers[i]!.toLowerCase() !== 'host') continue;
    // A host name, read without regard to case like any other (screenHost).
    const inHost = inName(set, headers[i + 1]!);
    if (inHost.length > 0) return refusal(inHost, 'is in the Host header; a placeholder goes only in other headers');
  }
  return undefined;
}

/** The placeholders a host name (or an authority) holds, in any case. */
function inName(set: SecretSet, raw: string): LoadedSecret[] {
  const forms = readings(raw, false).map((f) => f.toLowerCase());
  return set.placeholders.filter((s) => forms.some((f) => f.includes(s.placeholder!.toLowerCase())));
}

/**
 * A host name checked alone (a CONNECT authority, a TLS server name, an absolute URL's host): a
 * name is read without regard to case, so a placeholder in it is found in any case. A name
 * carries no secret anywhere; refused, it is never written down (the refusal has no host).
 */
export function screenHost(set: SecretSet | undefined, rawHost: string): SecretRefusal | undefined {
  if (set === undefined || set.placeholders.length === 0) return undefined;
  const inHost = inName(set, rawHost);
  return inHost.length === 0 ? undefined : refusal(inHost, 'is in the host name; a placeholder goes only in headers');
}

/** What the proxy's own checks read in place of a value a secret went into. */
const SCREENED = '(secret)';

function swapAll(text: string, secrets: readonly LoadedSecret[]): string {
  let out = text;
  for (const s of secrets) out = out.split(s.placeholder!).join(s.value);
  return out;
}

/** A header value with each bound placeholder swapped for its value, inside Basic credentials too. */
function swapped(value: string, secrets: readonly LoadedSecret[]): string {
  const raw = swapAll(value, secrets);
  if (raw !== value) return raw;
  const basic = basicDecoded(value);
  if (basic === undefined) return value;
  const inside = swapAll(basic, secrets);
  // Re-encoded canonically: a server then reads exactly what was swapped.
  return inside === basic ? value : `Basic ${Buffer.from(inside, 'latin1').toString('base64')}`;
}

/** The Connection options left once those naming a field the proxy sets are gone (it would otherwise be dropped as hop-by-hop). */
function withoutOptions(value: string, names: ReadonlySet<string>): string {
  return value
    .split(',')
    .filter((o) => !names.has(o.trim().toLowerCase()))
    .join(',');
}

/**
 * The fields of one request to `target`, with its secrets put in, or the refusal. Inside an
 * inspected connection to a host whose entry binds secrets, each binding with a header sets it
 * (every field of that name the sandbox sent is removed, in any case), and a bound placeholder in
 * another field is swapped for its value. Anywhere else, and for any secret not bound to this
 * host, a placeholder in a field name or value (raw, percent- or Basic-decoded) or in the URL is
 * refused: over plain HTTP no secret is ever put in, since it would travel in clear.
 */
export function applySecrets(set: SecretSet | undefined, target: SecretTarget, request: SecretRequest): SecretsApplied {
  const bindings = request.inspected ? target.secrets ?? [] : [];
  if ((set === undefined || set.byName.size === 0) && bindings.length === 0) return { ok: true, headers: request.headers, screened: request.headers, injected: [] };
  if (set === undefined) return { ok: false, reason: 'secret_wrong_host', detail: `the secrets bound to ${target.host} are not loaded`, secrets: [] };
  const early = screenTarget(set, request.target, request.headers);
  if (early !== undefined) return early;

  const bound = new Map<string, LoadedSecret>();
  for (const b of bindings) {
    const secret = set.byName.get(b.name);
    if (secret === undefined) return { ok: false, reason: 'secret_wrong_host', detail: `secret ${b.name} bound to ${target.host} is not loaded`, secrets: [] };
    bound.set(b.name, secret);
  }
  const setHeaders = new Set(bindings.flatMap((b) => (b.header === undefined ? [] : [b.header.toLowerCase()])));
  const elsewhere = request.inspected ? `to ${target.host}, which it is not bound to` : `of a plain-HTTP request to ${target.host}: a secret goes only into inspected TLS, never in clear`;

  const headers: string[] = [];
  const screened: string[] = [];
  const used = new Set<LoadedSecret>();
  for (let i = 0; i < request.headers.length; i += 2) {
    const name = request.headers[i]!;
    const value = request.headers[i + 1]!;
    const inName = found(set, readings(name, false));
    if (inName.length > 0) return refusal(inName, 'is in a header name; a placeholder goes only in header values');
    const lower = name.toLowerCase();
    // The sandbox's own copy of a field the proxy sets is dropped unread: never passed alongside.
    if (setHeaders.has(lower)) continue;
    const inValue = found(set, readings(value, true));
    const stray = inValue.filter((s) => !bound.has(s.name));
    if (stray.length > 0) return refusal(stray, `is in the ${name.slice(0, 64)} header ${elsewhere}`);
    const kept = lower === 'connection' && setHeaders.size > 0 ? withoutOptions(value, setHeaders) : value;
    const out = inValue.length === 0 ? kept : swapped(kept, inValue);
    if (out !== kept) for (const s of inValue) used.add(s);
    headers.push(name, out);
    screened.push(name, out === kept ? kept : SCREENED);
  }
  for (const b of bindings) {
    if (b.header === undefined) continue;
    const secret = bound.get(b.name)!;
    headers.push(b.header, b.format.replace('{}', () => secret.value));
    screened.push(b.header, SCREENED);
    used.add(secret);
  }
  return { ok: true, headers, screened, injected: [...used].map(secretLabel) };
}
