/**
 * Where a request inside an inspected connection goes: the host the connection's TLS was
 * terminated for, and nowhere else. Pure. The request must be in origin-form with exactly one
 * Host, read as transparent HTTP reads it (a Host without a port means 443), and that Host must
 * name the connection's host and port: a request naming another host is domain fronting (the
 * server behind a shared address would route it by Host), refused `host_mismatch`.
 */
import { parseHostName } from '../../policy/index.js';
import type { InspectedEntry } from '../admission/index.js';
import { HTTPS_PORT, type ParsedTarget } from './authority.js';
import { transparentTarget } from './transparent-http.js';

export type InspectedTarget =
  | Extract<ParsedTarget, { ok: true }>
  | Extract<ParsedTarget, { ok: false }>
  | { readonly ok: false; readonly reason: 'host_mismatch'; readonly detail: string };

/** Shown in a detail: what the client wrote, cut and kept to printable ASCII. */
function shown(value: string): string {
  const text = value.replace(/[^\x20-\x7e]/g, '?');
  return text.length > 100 ? `${text.slice(0, 100)}...` : text;
}

export function inspectedTarget(rawHeaders: readonly string[], url: string, entry: InspectedEntry): InspectedTarget {
  const parsed = transparentTarget(rawHeaders, url, entry.port, HTTPS_PORT);
  if (!parsed.ok) return parsed;
  const name = parseHostName(parsed.host);
  if (!name.ok || name.name !== entry.host) {
    return {
      ok: false,
      reason: 'host_mismatch',
      detail: `this connection is TLS to ${entry.host}, and the request's Host names ${shown(parsed.host)}: each request must name the host the connection was opened to`,
    };
  }
  return { ok: true, host: entry.host, port: entry.port, path: parsed.path };
}
