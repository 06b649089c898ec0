/** The request-head verdict on its own: Host exactly the URL's authority, framing read once, fields filtered. */
import t from 'tap';
import { checkRequestHead } from '../../proxy/index.js';

const H = (...pairs: string[]): string[] => pairs;

const cases: { name: string; headers: string[]; http10?: boolean; ok: boolean; framing?: string; detail?: RegExp }[] = [
  { name: 'Host with the default port left out', headers: H('Host', 'a.example'), ok: true, framing: 'none' },
  { name: 'Host in another case with a trailing dot', headers: H('Host', 'A.Example.'), ok: true, framing: 'none' },
  { name: 'Host with the explicit default port', headers: H('Host', 'a.example:80'), ok: true },
  { name: 'no Host on HTTP/1.0', headers: [], http10: true, ok: true },
  { name: 'no Host on HTTP/1.1', headers: [], ok: false, detail: /needs a Host/ },
  { name: 'two Host headers', headers: H('Host', 'a.example', 'host', 'a.example'), ok: false, detail: /more than one Host/ },
  { name: 'Host for another name', headers: H('Host', 'b.example'), ok: false },
  { name: 'Host for another port', headers: H('Host', 'a.example:8080'), ok: false },
  { name: 'Host with a path', headers: H('Host', 'a.example/x'), ok: false },
  { name: 'Host with a query', headers: H('Host', 'a.example?x'), ok: false },
  { name: 'Host with a fragment', headers: H('Host', 'a.example#x'), ok: false },
  { name: 'Host with userinfo', headers: H('Host', 'u@a.example'), ok: false },
  { name: 'Host with a port then userinfo', headers: H('Host', 'a.example:80@b.example'), ok: false },
  { name: 'Host with a leading-zero port', headers: H('Host', 'a.example:080'), ok: false },
  { name: 'Host with a signed port', headers: H('Host', 'a.example:+80'), ok: false },
  { name: 'Host with spaces around the port', headers: H('Host', 'a.example: 80'), ok: false },
  { name: 'Host as an IP literal', headers: H('Host', '127.0.0.1'), ok: false },
  { name: 'Content-Length', headers: H('Host', 'a.example', 'Content-Length', '12'), ok: true, framing: 'length 12' },
  { name: 'Content-Length 0 is no body', headers: H('Host', 'a.example', 'Content-Length', '0'), ok: true, framing: 'none' },
  { name: 'two Content-Lengths', headers: H('Host', 'a.example', 'Content-Length', '1', 'Content-Length', '1'), ok: false },
  { name: 'a Content-Length list', headers: H('Host', 'a.example', 'Content-Length', '1, 1'), ok: false },
  { name: 'chunked', headers: H('Host', 'a.example', 'Transfer-Encoding', 'Chunked'), ok: true, framing: 'chunked' },
  { name: 'a coding before chunked', headers: H('Host', 'a.example', 'Transfer-Encoding', 'gzip, chunked'), ok: false, detail: /other than chunked/ },
  { name: 'chunked twice', headers: H('Host', 'a.example', 'Transfer-Encoding', 'chunked', 'Transfer-Encoding', 'chunked'), ok: false },
  { name: 'both framings', headers: H('Host', 'a.example', 'Transfer-Encoding', 'chunked', 'Content-Length', '3'), ok: false, detail: /both/ },
  { name: 'Connection naming Content-Length', headers: H('Host', 'a.example', 'Connection', 'close, Content-Length'), ok: false, detail: /content-length/ },
  { name: 'Connection naming Transfer-Encoding', headers: H('Host', 'a.example', 'Connection', 'transfer-encoding'), ok: false },
  { name: 'Connection naming Host', headers: H('Host', 'a.example', 'connection', 'HOST'), ok: false },
  { name: 'Connection with a non-token option', headers: H('Host', 'a.example', 'Connection', 'a b'), ok: false },
];
for (const c of cases) {
  t.test(c.name, async (t) => {
    const head = checkRequestHead(c.headers, 'a.example', 80, c.http10 !== true);
    t.equal(head.ok, c.ok);
    if (head.ok && c.framing !== undefined) t.equal(head.framing.kind === 'length' ? `length ${head.framing.length}` : head.framing.kind, c.framing);
    if (!head.ok && c.detail) t.match(head.detail, c.detail);
  });
}

t.test('only end-to-end fields are passed on, in order, duplicates kept', async (t) => {
  const head = checkRequestHead(
    H('Host', 'a.example', 'Accept', '*/*', 'Connection', 'keep-alive, X-Hop', 'X-Hop', '1', 'Keep-Alive', 'timeout=5', 'Proxy-Authorization', 'Basic x', 'Proxy-Connection', 'keep-alive',
      'TE', 'trailers', 'Upgrade', 'h2c', 'HTTP2-Settings', 'x', 'Expect', '100-continue', 'Content-Length', '3', 'Set-Thing', 'a', 'Set-Thing', 'b'),
    'a.example', 80, true,
  );
  t.ok(head.ok);
  if (head.ok) t.same(head.headers, ['Accept', '*/*', 'Set-Thing', 'a', 'Set-Thing', 'b']);
});
