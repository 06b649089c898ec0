/**
 * Host-name parsing and normalisation for the egress policy.
 *
 * The proxy decides on names, so a name must mean one thing to every layer that later reads it.
 * Anything a resolver, a URL parser or a TLS stack could read differently is refused here:
 * non-ASCII (UTS #46 mapping would turn `ⓔⓧⓐⓜⓟⓛⓔ.com` into `example.com`), escapes, wildcards,
 * userinfo, and every spelling of an IP address that some resolver accepts (`0x7f.1`,
 * `2130706433`, `0177.0.0.1`, `127.1`, bracketed IPv6 with zone ids).
 *
 * One pass over the character codes, because it runs on every request.
 */

export type HostParse =
  | { readonly ok: true; readonly name: string }
  | { readonly ok: false; readonly reason: 'malformed_host' | 'ip_literal'; readonly detail: string };

const MAX_NAME = 253; // RFC 1035 §2.3.4, without the trailing dot
const MAX_LABEL = 63;

const DOT = 0x2e;
const HYPHEN = 0x2d;

function malformed(detail: string): HostParse {
  return { ok: false, reason: 'malformed_host', detail };
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isHexDigit(c: number): boolean {
  return isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);
}

/**
 * WHATWG URL "ends in a number" for one label: decimal digits, or 0x followed by hex digits.
 * getaddrinfo and browsers read such labels as parts of an IPv4 address (inet_aton's dotted,
 * octal and hex forms).
 */
function isNumericLabel(name: string, start: number, end: number): boolean {
  if (end - start >= 2 && name.charCodeAt(start) === 0x30 && (name.charCodeAt(start + 1) | 0x20) === 0x78) {
    for (let i = start + 2; i < end; i++) if (!isHexDigit(name.charCodeAt(i))) return false;
    return true;
  }
  for (let i = start; i < end; i++) if (!isDigit(name.charCodeAt(i))) return false;
  return end > start;
}

/** Why a character cannot be in a host name (letters, digits, "-", "_", "." are allowed). */
function badCharacter(c: number): string | undefined {
  const letter = (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7a;
  if (letter || isDigit(c) || c === HYPHEN || c === DOT || c === 0x5f /* _ (e.g. _dmarc) */) return undefined;
  if (c > 0x7e) return 'non-ASCII character in host (send punycode)';
  if (c < 0x21 || c === 0x7f) return 'control character or space in host';
  return 'character not allowed in a host name (only letters, digits, "-", "_" and ".")';
}

/**
 * Parses the host of a CONNECT authority or an absolute http:// URL (already split from the
 * port; IPv6 literals keep their brackets). Returns the normalised name: lower-case, one
 * trailing dot removed.
 */
export function parseHostName(raw: string): HostParse {
  if (raw.length === 0) return malformed('empty host');
  if (raw.charCodeAt(0) === 0x5b /* [ */) {
    // Any bracketed host is an IPv6 literal (or garbage): names are never bracketed.
    return raw.endsWith(']') && raw.length > 2
      ? { ok: false, reason: 'ip_literal', detail: 'bracketed IPv6 literal' }
      : malformed('unterminated IPv6 bracket');
  }
  // Characters are checked on the raw text, before lower-casing: U+212A KELVIN SIGN lower-cases
  // to ASCII "k" and would otherwise turn into an allowed name.
  const end = raw.charCodeAt(raw.length - 1) === DOT ? raw.length - 1 : raw.length;
  if (end === 0) return malformed('empty host');
  if (end > MAX_NAME) return malformed(`name longer than ${MAX_NAME} octets`);
  let labels = 1;
  let labelStart = 0;
  let allNumeric = true;
  let lastNumeric = false;
  for (let i = 0; i <= end; i++) {
    const c = i === end ? DOT : raw.charCodeAt(i);
    if (c !== DOT) {
      const bad = badCharacter(c);
      if (bad !== undefined) return malformed(bad);
      continue;
    }
    const length = i - labelStart;
    if (length === 0) return malformed('empty label');
    if (length > MAX_LABEL) return malformed(`label longer than ${MAX_LABEL} octets`);
    if (raw.charCodeAt(labelStart) === HYPHEN || raw.charCodeAt(i - 1) === HYPHEN) return malformed('label starts or ends with "-"');
    lastNumeric = isNumericLabel(raw, labelStart, i);
    allNumeric &&= lastNumeric;
    if (i < end) labels += 1;
    labelStart = i + 1;
  }
  if (lastNumeric) {
    // More than four numeric parts is no address to anyone and no DNS name either (WHATWG fails
    // the host); anything else ending in a number is an address to some resolver.
    if (labels > 4 && allNumeric) return malformed('numeric name with more than four parts');
    return { ok: false, reason: 'ip_literal', detail: 'IP address literal (numeric last label)' };
  }
  return { ok: true, name: raw.slice(0, end).toLowerCase() };
}
