/**
 * Create bodies for containers, volumes and networks must be printable ASCII: the socket
 * proxy refuses non-ASCII bytes and `\u` escapes (Docker folds JSON keys by Unicode case,
 * so `"Bindſ"` would act as `Binds`), and `JSON.stringify` writes control characters as
 * `\u00XX`. Refusing such values here gives the caller a clear message instead of a bare 403.
 */
import { SandboxError } from './errors.js';

/** Printable ASCII, space included: what any string in a create body may hold. */
export const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
/** Printable ASCII without the space, at least one character: an image reference, a driver name. */
export const ASCII_WORD = /^[\x21-\x7e]+$/;

/** Throws `invalid_spec` naming `where` unless `value` is printable ASCII. */
function requirePrintableAscii(value: string, where: string): string {
  if (!PRINTABLE_ASCII.test(value)) {
    const bad = [...value].find((ch) => !PRINTABLE_ASCII.test(ch)) ?? '';
    const codePoint = bad.codePointAt(0)?.toString(16).toUpperCase().padStart(4, '0') ?? '';
    const hint = (bad.codePointAt(0) ?? 0) > 0x7e
      ? 'Docker create bodies must be ASCII: write host names in punycode and keep image names, env values and labels ASCII.'
      : 'control characters (newline, tab, ...) cannot be sent in a Docker create body.';
    throw new SandboxError('invalid_spec', `${where} contains U+${codePoint}; ${hint}`);
  }
  return value;
}

/**
 * A copy of a map of strings (labels, pinned hosts) whose keys and values are all printable
 * ASCII, checked once where the map enters the controller; `where` names it in the error.
 */
export function printableAsciiMap(map: Readonly<Record<string, string>> | undefined, where: string): Readonly<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(map ?? {})) out[requirePrintableAscii(key, `${where} key`)] = requirePrintableAscii(String(value), `${where}.${key}`);
  return Object.freeze(out);
}

/** Serialises a request body and proves it is what the socket proxy accepts. */
export function serialiseAsciiBody(body: unknown, what: string): string {
  const json = JSON.stringify(body);
  if (!PRINTABLE_ASCII.test(json) || json.includes('\\u')) {
    throw new SandboxError('invalid_spec', `The ${what} body would not be plain ASCII JSON; refusing to send it.`);
  }
  return json;
}
