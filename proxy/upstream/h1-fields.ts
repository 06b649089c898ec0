/**
 * The fields of an upstream's response head as h1-response.ts reads them: a field line split and
 * checked, how the fields frame the body (RFC 9112 §6.3, strictly: one Content-Length or chunked
 * alone, never both), whether they close the connection, and how long a Keep-Alive lets it idle.
 */
import { HTTP_TOKEN } from '../../policy/index.js';

const LENGTH = /^[0-9]{1,15}$/;

const isBlank = (code: number): boolean => code === 0x20 || code === 0x09;

/**
 * A field line's name and value (the spaces and tabs around it trimmed, nothing else), or why it
 * is not one. The trim is a scan of its own: a regular expression that trims both ends tried its
 * second half at every blank of the value, a quarter of a microsecond per field on every response.
 */
export function fieldOf(line: string): [string, string] | string {
  if (line.startsWith(' ') || line.startsWith('\t')) return 'a field line is folded (obs-fold)';
  const colon = line.indexOf(':');
  const name = colon === -1 ? '' : line.slice(0, colon);
  if (!HTTP_TOKEN.test(name)) return 'a field name is not a token';
  let start = colon + 1;
  let end = line.length;
  while (start < end && isBlank(line.charCodeAt(start))) start += 1;
  while (end > start && isBlank(line.charCodeAt(end - 1))) end -= 1;
  return [name, line.slice(start, end)];
}

/**
 * Whether a field's name is `lower` (given in lower case), in any case. Most names differ in
 * length, and are not lower-cased at all: each of the checks below reads every field of a response.
 */
function named(name: string, lower: string): boolean {
  return name.length === lower.length && (name === lower || name.toLowerCase() === lower);
}

/** How a final response's body is framed: its length, chunked, to the close, or why none can be trusted. */
export function framingOf(fields: readonly string[]): number | 'chunked' | 'close' | { readonly bad: string } {
  let coding: string | undefined;
  let length: string | undefined;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i]!;
    if (named(name, 'transfer-encoding')) {
      if (coding !== undefined) return { bad: 'Transfer-Encoding appears twice' };
      coding = fields[i + 1]!.toLowerCase();
    } else if (named(name, 'content-length')) {
      if (length !== undefined && length !== fields[i + 1]) return { bad: 'two Content-Length fields that differ' };
      length = fields[i + 1]!;
    }
  }
  if (coding !== undefined) {
    if (length !== undefined) return { bad: 'Transfer-Encoding beside Content-Length' };
    return coding === 'chunked' ? 'chunked' : { bad: 'a transfer coding other than chunked alone' };
  }
  if (length === undefined) return 'close';
  return LENGTH.test(length) ? Number(length) : { bad: 'Content-Length is not a number' };
}

export function connectionCloses(fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i += 2) {
    if (named(fields[i]!, 'connection') && fields[i + 1]!.split(',').some((o) => o.trim().toLowerCase() === 'close')) return true;
  }
  return false;
}

const KEEP_ALIVE_TIMEOUT = /(?:^|[,;\s])timeout\s*=\s*(\d{1,6})/i;

/** How long a Keep-Alive field lets the connection idle, a second short of its timeout, if it says. */
export function keepAliveHint(fields: readonly string[]): number | undefined {
  for (let i = 0; i < fields.length; i += 2) {
    if (!named(fields[i]!, 'keep-alive')) continue;
    const hint = KEEP_ALIVE_TIMEOUT.exec(fields[i + 1]!);
    return hint === null ? undefined : Number(hint[1]) * 1000 - 1000;
  }
  return undefined;
}
