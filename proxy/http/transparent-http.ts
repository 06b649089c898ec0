/**
 * Where a plain-HTTP request that came in on the transparent HTTP listener goes: the host of its
 * Host header, on the port the client dialled. Pure. The request must be in origin-form (a path:
 * what a client that believes it talks to the server sends), carry exactly one Host header naming
 * a host (the policy's name rules apply after this), and any port in it must be the dialled port:
 * otherwise the name checked and the server reached could differ. The rest of the head is judged
 * as for the explicit proxy (request-head.ts), the Host header included.
 */
import { HTTP_PORT, parseHostHeader, type ParsedTarget } from './authority.js';

function bad(detail: string): ParsedTarget {
  return { ok: false, reason: 'bad_request', detail };
}

/**
 * `url` is the request-target as sent; `port` the port the client dialled; `defaultPort` what a
 * Host without a port means (http's own, or https's inside an inspected connection).
 */
export function transparentTarget(rawHeaders: readonly string[], url: string, port: number, defaultPort = HTTP_PORT): ParsedTarget {
  if (!url.startsWith('/')) return bad('a request to a transparent listener must name a path (origin-form), not a URL or an authority');
  if (url.includes('#')) return bad('a fragment is not allowed in a request target');
  let host: string | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() !== 'host') continue;
    if (host !== undefined) return bad('more than one Host header');
    host = rawHeaders[i + 1]!;
  }
  if (host === undefined || host === '') return bad('a transparent HTTP request needs a Host header: it names the destination');
  // No port in Host means the scheme's own, as request-head.ts reads it too.
  const parsed = parseHostHeader(host, defaultPort);
  if (!parsed.ok) return parsed;
  if (parsed.port !== port) return bad(`the Host header names port ${parsed.port}, but the request came to port ${port}`);
  return { ok: true, host: parsed.host, port, path: url };
}
