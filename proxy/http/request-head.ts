/**
 * The head of a plain-HTTP request, judged before anything is forwarded: the Host header must
 * be exactly the URL's authority, no `Connection` option may name a framing or routing field, and
 * the body's framing is read once here so that the proxy, not the client, says how the body is
 * framed upstream. Pure: it takes the raw header list Node parsed and returns a verdict.
 *
 * The attack this stops is request smuggling: when a proxy drops a framing header (because the
 * client listed it in `Connection`, or because it is hop-by-hop) and passes the body on raw, the
 * upstream reads the body as a second request, for a host the proxy never checked.
 */
import { HTTP_TOKEN, parseHostName } from '../../policy/index.js';
import { HTTP_PORT } from './authority.js';

export type BodyFraming =
  | { readonly kind: 'none' }
  | { readonly kind: 'length'; readonly length: number }
  | { readonly kind: 'chunked' };

export type RequestHead =
  | {
      readonly ok: true;
      /** The fields to pass on, as a flat name/value list; no framing, hop-by-hop or Proxy-* fields. */
      readonly headers: readonly string[];
      readonly framing: BodyFraming;
    }
  | { readonly ok: false; readonly detail: string };

// RFC 9110 §7.6.1 hop-by-hop fields, the legacy ones proxies still meet, and the fields this proxy
// writes itself (Host, Content-Length). `expect` is answered here (Node sends 100 Continue).
const NOT_FORWARDED = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  'expect',
  'host',
  'content-length',
]);

/** Fields a `Connection` header must never name: dropping them changes where a request goes or where it ends. */
const NEVER_HOP_BY_HOP = new Set(['host', 'content-length', 'transfer-encoding']);

const HOST_PORT = /^([^:]+)(?::([1-9][0-9]{0,4}))?$/;

function bad(detail: string): RequestHead {
  return { ok: false, detail };
}

/** Whether a Host header value is exactly `host[:port]` naming `host` and `port` (the scheme's own port may be left out). */
function hostMatches(value: string, host: string, port: number, defaultPort: number): boolean {
  const m = HOST_PORT.exec(value);
  if (m === null) return false;
  const name = parseHostName(m[1]!);
  const givenPort = m[2] === undefined ? defaultPort : Number(m[2]);
  return name.ok && name.name === host && givenPort === port;
}

/**
 * Judges a request head. `rawHeaders` is Node's flat name/value list; `host` and `port` are the
 * URL's, already normalised; `hostRequired` is false only for HTTP/1.0; `defaultPort` is the
 * port a Host without one means (443 inside an inspected TLS connection).
 */
export function checkRequestHead(rawHeaders: readonly string[], host: string, port: number, hostRequired: boolean, defaultPort = HTTP_PORT): RequestHead {
  const named = new Set<string>();
  let hostValue: string | undefined;
  let hosts = 0;
  let length: string | undefined;
  let lengths = 0;
  let encoding: string | undefined;
  let encodings = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    const value = rawHeaders[i + 1]!;
    if (name === 'host') {
      hosts += 1;
      hostValue = value;
    } else if (name === 'content-length') {
      lengths += 1;
      length = value;
    } else if (name === 'transfer-encoding') {
      encodings += 1;
      encoding = value;
    } else if (name === 'connection') {
      for (const option of value.split(',')) {
        const token = option.trim().toLowerCase();
        if (token === '') continue;
        if (!HTTP_TOKEN.test(token)) return bad('a Connection option is not a token');
        if (NEVER_HOP_BY_HOP.has(token)) return bad(`the Connection header names ${token}, which decides how the request is framed or routed`);
        named.add(token);
      }
    }
  }

  if (hosts > 1) return bad('more than one Host header');
  if (hostValue === undefined) {
    if (hostRequired) return bad('an HTTP/1.1 request needs a Host header');
  } else if (!hostMatches(hostValue, host, port, defaultPort)) {
    return bad('the Host header must be exactly the host and port of the URL');
  }

  let framing: BodyFraming;
  if (encodings > 0) {
    if (lengths > 0) return bad('both Content-Length and Transfer-Encoding');
    // Only plain chunked: a coding before it (gzip, chunked) would be lost in re-framing.
    if (encodings > 1 || encoding?.trim().toLowerCase() !== 'chunked') return bad('Transfer-Encoding other than chunked');
    framing = { kind: 'chunked' };
  } else if (lengths > 0) {
    if (lengths > 1 || length === undefined || !/^[0-9]{1,15}$/.test(length)) return bad('a Content-Length that is not one decimal number');
    const n = Number(length);
    framing = n === 0 ? { kind: 'none' } : { kind: 'length', length: n };
  } else {
    framing = { kind: 'none' };
  }

  const headers: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const lower = name.toLowerCase();
    if (NOT_FORWARDED.has(lower) || lower.startsWith('proxy-') || named.has(lower)) continue;
    headers.push(name, rawHeaders[i + 1]!);
  }
  return { ok: true, headers, framing };
}
