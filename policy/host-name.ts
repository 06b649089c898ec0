/**
 * Host-name parsing and normalisation for the egress policy.
 *
 * The proxy decides on names, so a name must mean one thing to every layer that later reads it.
 * Anything a resolver, a URL parser or a TLS stack could read differently is refused here:
 * non-ASCII (UTS #46 mapping would turn `ⓔⓧⓐⓜⓟⓛⓔ.com` into `example.com`), escapes, wildcards,
 * userinfo, and every spelling of an IP address that some resolver accepts (`0x7f.1`,
 * `2130706433`, `0177.0.0.1`, `127.1`, bracketed IPv6 with zone ids).
 */

export type HostParse =
  | { readonly ok: true; readonly name: string }
  | { readonly ok: false; readonly reason: 'malformed_host' | 'ip_literal'; readonly detail: string };

const MAX_NAME = 253; // RFC 1035 §2.3.4, without the trailing dot
const MAX_LABEL = 63;
// Letters, digits, hyphen (RFC 1123) and underscore (seen in real service names, e.g. _dmarc).
const NAME_CHARS = /^[a-zA-Z0-9_.-]+$/;
// WHATWG URL "ends in a number": the last label is decimal digits or 0x-hex. getaddrinfo and
// browsers read such names as IPv4 addresses in inet_aton's dotted, octal and hex forms.
const NUMERIC_LABEL = /^(?:[0-9]+|0x[0-9a-f]*)$/;

function malformed(detail: string): HostParse {
  return { ok: false, reason: 'malformed_host', detail };
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
  if (raw.length > MAX_NAME + 1) return malformed(`name longer than ${MAX_NAME} octets`);
  // Characters are checked before lower-casing: U+212A KELVIN SIGN lower-cases to ASCII "k".
  if (!NAME_CHARS.test(raw)) {
    // Name the class of problem, so the client learns what to fix.
    for (const ch of raw) {
      const code = ch.codePointAt(0) ?? 0;
      if (code > 0x7e) return malformed('non-ASCII character in host (send punycode)');
      if (code < 0x21) return malformed('control character or space in host');
    }
    return malformed('character not allowed in a host name (only letters, digits, "-", "_" and ".")');
  }
  let name = raw.toLowerCase();
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (name.length === 0) return malformed('empty host');
  if (name.length > MAX_NAME) return malformed(`name longer than ${MAX_NAME} octets`);

  const labels = name.split('.');
  for (const label of labels) {
    if (label.length === 0) return malformed('empty label');
    if (label.length > MAX_LABEL) return malformed(`label longer than ${MAX_LABEL} octets`);
    if (label.startsWith('-') || label.endsWith('-')) return malformed('label starts or ends with "-"');
  }

  const last = labels[labels.length - 1] ?? '';
  if (NUMERIC_LABEL.test(last)) {
    // More than four numeric parts is no address to anyone and no DNS name either (WHATWG fails
    // the host); anything else ending in a number is an address to some resolver.
    if (labels.length > 4 && labels.every((l) => NUMERIC_LABEL.test(l))) {
      return malformed('numeric name with more than four parts');
    }
    return { ok: false, reason: 'ip_literal', detail: 'IP address literal (numeric last label)' };
  }
  return { ok: true, name };
}
