/**
 * Request-target parsing for the two forms a forward proxy accepts (RFC 9112 §3.2): the
 * authority-form of CONNECT (`host:port`) and the absolute-form of plain HTTP
 * (`http://host[:port]/path`). Strict on purpose: where URL parsers disagree about which part is
 * the host (userinfo, backslashes, fragments, percent-escapes), the request is refused instead of
 * guessed at, so the name that is checked is the name that is dialed.
 */
import type { Reason } from '../../policy/index.js';

/** http's own port (RFC 9110 §4.2.1): what an authority or Host without a port means, and the one transparent port read as HTTP. */
export const HTTP_PORT = 80;
/** What a Host without a port means inside an inspected (TLS) connection. */
export const HTTPS_PORT = 443;

export type ParsedTarget =
  | { readonly ok: true; readonly host: string; readonly port: number; readonly path: string }
  | { readonly ok: false; readonly reason: Extract<Reason, 'bad_request' | 'malformed_host'>; readonly detail: string };

// A decimal port without sign or leading zeros (RFC 3986 allows them; we do not, so that `0443`
// and `+443` cannot be read as different ports by different layers).
const PORT = /^[1-9][0-9]{0,4}$/;

function bad(detail: string): ParsedTarget {
  return { ok: false, reason: 'bad_request', detail };
}

function parsePort(text: string): number | undefined {
  if (!PORT.test(text)) return undefined;
  const port = Number(text);
  return port <= 65535 ? port : undefined;
}

/**
 * Splits `host:port` (host may be a bracketed IPv6 literal, kept with its brackets so that the
 * host-name rules refuse it as a literal). `defaultPort` applies when there is no port at all.
 */
function splitHostPort(authority: string, defaultPort: number | undefined): ParsedTarget {
  if (authority.includes('@')) return bad('userinfo is not allowed in the authority');
  let host: string;
  let portText: string | undefined;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close === -1) return { ok: false, reason: 'malformed_host', detail: 'unterminated IPv6 bracket' };
    host = authority.slice(0, close + 1);
    const rest = authority.slice(close + 1);
    if (rest !== '' && !rest.startsWith(':')) return bad('unexpected text after the IPv6 literal');
    portText = rest === '' ? undefined : rest.slice(1);
  } else {
    const colon = authority.lastIndexOf(':');
    host = colon === -1 ? authority : authority.slice(0, colon);
    portText = colon === -1 ? undefined : authority.slice(colon + 1);
    if (host.includes(':')) {
      // `::1:443` is itself a valid IPv6 address: without brackets the port is a guess.
      return { ok: false, reason: 'malformed_host', detail: 'IPv6 literal without brackets' };
    }
  }
  if (host === '') return { ok: false, reason: 'malformed_host', detail: 'empty host' };
  let port: number | undefined;
  if (portText === undefined) {
    if (defaultPort === undefined) return bad('the CONNECT target needs a port (host:port)');
    port = defaultPort;
  } else {
    port = parsePort(portText);
    if (port === undefined) return bad('the port must be a decimal number 1-65535');
  }
  return { ok: true, host, port, path: '' };
}

/** Parses the request-target of CONNECT: authority-form only, port required. */
export function parseConnectTarget(target: string): ParsedTarget {
  if (target.includes('/')) return bad('the CONNECT target must be host:port, not a URL');
  return splitHostPort(target, undefined);
}

/** Parses an absolute-form http:// request-target into host, port and origin-form path. */
export function parseAbsoluteUrl(target: string): ParsedTarget {
  const scheme = target.slice(0, 7).toLowerCase();
  if (scheme !== 'http://') {
    return bad(/^[a-z][a-z0-9+.-]*:/i.test(target) ? 'only http:// URLs are proxied (use CONNECT for https)' : 'not an absolute URL');
  }
  const rest = target.slice(7);
  if (rest.includes('#')) return bad('a fragment is not allowed in a request target');
  let end = rest.length;
  for (const stop of ['/', '?']) {
    const at = rest.indexOf(stop);
    if (at !== -1 && at < end) end = at;
  }
  const authority = rest.slice(0, end);
  if (authority.includes('\\')) return bad('backslash in the authority');
  const parsed = splitHostPort(authority, HTTP_PORT);
  if (!parsed.ok) return parsed;
  const path = rest.slice(end);
  return { ...parsed, path: path === '' ? '/' : path.startsWith('?') ? `/${path}` : path };
}

/**
 * Parses a Host header value (`host[:port]`, RFC 9110 §7.2) the same strict way: no userinfo, no
 * path, a decimal port; `defaultPort` when it names none.
 */
export function parseHostHeader(value: string, defaultPort: number): ParsedTarget {
  if (/[/?#\\]/.test(value)) return bad('the Host header must be host[:port] only');
  return splitHostPort(value, defaultPort);
}
