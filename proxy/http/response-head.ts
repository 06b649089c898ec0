/**
 * The head of an upstream's response, judged before a byte of it reaches the client: a final
 * status 200-599, a reason phrase and header fields that are valid HTTP/1.1 (RFC 9110 §5.5,
 * RFC 9112 §4). A hostile or broken upstream can send anything; what it sends is either passed on
 * as a well-formed response or not at all. Pure: takes what the HTTP client parsed, returns the
 * fields to write, without hop-by-hop fields (the proxy frames its own response to the client).
 */
import { EGRESS_SANDBOX_HEADER } from '../../common/index.js';
import { HTTP_TOKEN } from '../../policy/index.js';

export type ResponseHead =
  | { readonly ok: true; readonly headers: readonly string[] }
  | { readonly ok: false; readonly detail: string };

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings']);
/**
 * The proxy's own markers: its refusal reason (record/refusal.ts), by which an agent tells a
 * policy block from the server's answer, and the sandbox its health answer names (the
 * controller's probe reads it). Only a response the proxy made carries them; an upstream's are
 * dropped.
 */
const PROXY_OWN = new Set(['x-egress-reason', EGRESS_SANDBOX_HEADER.toLowerCase()]);

// A field value: visible ASCII, obs-text, space and tab; never CR, LF, NUL or another control.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const REASON_PHRASE = /^[\t\x20-\x7e]*$/;

function bad(detail: string): ResponseHead {
  return { ok: false, detail };
}

/** `rawHeaders` alternate names and values, as the bytes arrived (decoded one byte per character). */
export function checkResponseHead(status: number, reason: string, rawHeaders: readonly string[]): ResponseHead {
  if (!Number.isInteger(status) || status < 200 || status > 599) return bad(`status ${status} is not a final HTTP status (200-599)`);
  if (!REASON_PHRASE.test(reason)) return bad('the reason phrase holds a control or non-ASCII byte');
  // Each name lower-cased once, read by both passes.
  const lowered: string[] = [];
  let named: Set<string> | undefined;
  let chunked = false;
  let length: string | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const value = rawHeaders[i + 1]!;
    if (!HTTP_TOKEN.test(name)) return bad('a header name is not a token');
    if (!FIELD_VALUE.test(value)) return bad(`header ${name} holds a control byte`);
    const lower = name.toLowerCase();
    lowered.push(lower);
    if (lower === 'connection') for (const option of value.split(',')) (named ??= new Set()).add(option.trim().toLowerCase());
    if (lower === 'content-length') {
      if (length !== undefined && value.trim() !== length) return bad('two Content-Length fields that differ');
      length = value.trim();
    }
    if (lower === 'transfer-encoding') {
      // The proxy frames the body again and passes no transfer coding on: a coding besides
      // chunked (gzip, chunked) would reach the client still applied, and named nowhere.
      if (chunked || value.trim().toLowerCase() !== 'chunked') return bad('a transfer coding other than chunked alone');
      chunked = true;
    }
  }
  const headers: string[] = [];
  let lengthPassed = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const lower = lowered[i / 2]!;
    // A body that arrived chunked is re-framed by the proxy; a Content-Length beside it (which
    // the parser would have refused anyway) must not reach the client, nor one on a 204, which
    // has no content (RFC 9110 §8.6).
    if (HOP_BY_HOP.has(lower) || PROXY_OWN.has(lower) || named?.has(lower) === true || ((chunked || status === 204) && lower === 'content-length')) continue;
    // One Content-Length, however many equal ones came (RFC 9110 §8.6 lets a recipient take
    // them as one): Node's and undici's parsers refuse a response that carries two.
    if (lower === 'content-length') {
      if (lengthPassed) continue;
      lengthPassed = true;
    }
    headers.push(rawHeaders[i]!, rawHeaders[i + 1]!);
  }
  return { ok: true, headers };
}
