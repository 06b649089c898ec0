/** The response-head verdict on its own: final status, reason and field bytes, hop-by-hop fields dropped. */
import t from 'tap';
import { checkResponseHead } from '../../proxy/index.js';

const cases: { name: string; status: number; reason?: string; headers?: string[]; ok: boolean }[] = [
  { name: '200', status: 200, ok: true },
  { name: '599', status: 599, ok: true },
  { name: '0', status: 0, ok: false },
  { name: '99', status: 99, ok: false },
  { name: 'an interim 1xx is not a final status', status: 103, ok: false },
  { name: '600', status: 600, ok: false },
  { name: 'not an integer', status: 200.5, ok: false },
  { name: 'a reason with a tab', status: 200, reason: 'O\tK', ok: true },
  { name: 'a reason with a control byte', status: 200, reason: 'O\x01K', ok: false },
  { name: 'a reason with CR', status: 200, reason: 'OK\rX', ok: false },
  { name: 'a non-ASCII reason', status: 200, reason: 'caf\xe9', ok: false },
  { name: 'obs-text in a value', status: 200, headers: ['X-A', 'caf\xe9'], ok: true },
  { name: 'NUL in a value', status: 200, headers: ['X-A', 'a\0b'], ok: false },
  { name: 'LF in a value', status: 200, headers: ['X-A', 'a\nb'], ok: false },
  { name: 'a space in a name', status: 200, headers: ['X A', 'b'], ok: false },
  { name: 'a colon in a name', status: 200, headers: ['X:A', 'b'], ok: false },
  { name: 'an empty name', status: 200, headers: ['', 'b'], ok: false },
  { name: 'chunked, in any case', status: 200, headers: ['Transfer-Encoding', ' Chunked '], ok: true },
  { name: 'a coding before chunked (it would reach the client applied and unnamed)', status: 200, headers: ['Transfer-Encoding', 'gzip, chunked'], ok: false },
  { name: 'a coding after chunked', status: 200, headers: ['Transfer-Encoding', 'chunked, gzip'], ok: false },
  { name: 'codings in two fields', status: 200, headers: ['Transfer-Encoding', 'gzip', 'Transfer-Encoding', 'chunked'], ok: false },
  { name: 'chunked twice', status: 200, headers: ['Transfer-Encoding', 'chunked', 'Transfer-Encoding', 'chunked'], ok: false },
  { name: 'two lengths that differ', status: 200, headers: ['Content-Length', '3', 'content-length', '4'], ok: false },
];
for (const c of cases) {
  t.test(c.name, async (t) => t.equal(checkResponseHead(c.status, c.reason ?? 'OK', c.headers ?? []).ok, c.ok));
}

t.test('hop-by-hop fields and those named by Connection are dropped; a length beside chunked too', async (t) => {
  const head = checkResponseHead(200, 'OK', ['Connection', 'close, X-Hop', 'X-Hop', '1', 'Keep-Alive', 'timeout=1', 'Transfer-Encoding', 'chunked', 'Content-Length', '5', 'Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'Upgrade', 'x', 'Trailer', 'X']);
  t.ok(head.ok);
  if (head.ok) t.same(head.headers, ['Set-Cookie', 'a=1', 'Set-Cookie', 'b=2']);
  const plain = checkResponseHead(200, 'OK', ['Content-Length', '5']);
  if (plain.ok) t.same(plain.headers, ['Content-Length', '5'], 'a length alone is kept');
});

// The inspected path's own parser takes equal lengths as one; a client's parser (Node's, undici's)
// refuses a response with two Content-Length fields, equal or not.
t.test('equal Content-Length fields reach the client as one', async (t) => {
  const head = checkResponseHead(200, 'OK', ['Content-Length', '3', 'X-A', '1', 'content-length', ' 3']);
  t.ok(head.ok);
  if (head.ok) t.same(head.headers, ['Content-Length', '3', 'X-A', '1']);
});

t.test('a 204 passes no Content-Length: it has no content', async (t) => {
  const head = checkResponseHead(204, 'No Content', ['Content-Length', '38', 'X-A', '1']);
  t.ok(head.ok);
  if (head.ok) t.same(head.headers, ['X-A', '1']);
  const notModified = checkResponseHead(304, 'Not Modified', ['Content-Length', '38']);
  if (notModified.ok) t.same(notModified.headers, ['Content-Length', '38'], 'a 304\'s length is the representation\'s, and kept');
});

// Only the proxy's own refusals carry X-Egress-Reason (record/refusal.ts): it is how an agent tells
// a policy block from the server's answer. An upstream that sends one (any server on the
// allowlist, or one that echoes a header it is asked for, like httpbin's /response-headers) would
// otherwise make its answer read as a refusal the proxy never made.
t.test("an upstream's X-Egress-Reason (or X-Egress-Sandbox) is not passed on, in any case", async (t) => {
  const head = checkResponseHead(403, 'Forbidden (host_not_allowed: x is not on the allowlist)', ['X-Egress-Reason', 'host_not_allowed', 'x-egress-reason', 'ip_literal', 'Content-Type', 'text/plain', 'X-EGRESS-SANDBOX', 'cap-a; lifecycle=x']);
  t.ok(head.ok);
  if (head.ok) t.same(head.headers, ['Content-Type', 'text/plain']);
});
