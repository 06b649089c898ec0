/**
 * The inspected path's response reader (proxy/upstream/h1-response.ts), on bytes alone: each
 * response read whole or a byte at a time gives the same events, and every shape it cannot frame
 * for certain is an error, never a guess.
 */
import t, { type Test } from 'tap';
import { MAX_FIELD_LINES, MAX_INTERIM_HEADS, ResponseParser, type ResponseEvent } from '../../proxy/upstream/h1-response.js';

interface Read {
  readonly head?: { status: number; reason: string; fields: readonly string[] };
  readonly body: string;
  readonly end?: { keepAlive: boolean };
  readonly error?: string;
}

/** Reads `bytes` as the response to one request (`head`: a HEAD), fed in pieces of `piece` bytes; `close`: the upstream closes after. */
function read(bytes: string, options: { piece?: number; head?: boolean; close?: boolean; max?: number } = {}): Read {
  const parser = new ResponseParser(options.max ?? 1024);
  parser.expect(options.head ?? false);
  const all = Buffer.from(bytes, 'latin1');
  const piece = options.piece ?? all.length;
  const out: { head?: Read['head']; body: string; end?: Read['end']; error?: string } = { body: '' };
  const drain = (): boolean => {
    for (let event: ResponseEvent | undefined = parser.next(); event !== undefined; event = parser.next()) {
      if (event.kind === 'head') out.head = { status: event.status, reason: event.reason, fields: event.fields };
      else if (event.kind === 'data') out.body += event.chunk.toString('latin1');
      else if (event.kind === 'end') out.end = { keepAlive: event.keepAlive };
      else out.error = event.detail;
      if (event.kind === 'end' || event.kind === 'error') return true;
    }
    return false;
  };
  for (let at = 0; at < all.length; at += Math.max(1, piece)) {
    parser.feed(all.subarray(at, at + Math.max(1, piece)));
    if (drain()) return out;
  }
  if (options.close) parser.close();
  drain();
  return out;
}

/** Whole and a byte at a time: the same. */
function both(t: Test, bytes: string, options: { head?: boolean; close?: boolean; max?: number } = {}): Read {
  const whole = read(bytes, options);
  t.same(read(bytes, { ...options, piece: 1 }), whole, 'a byte at a time reads the same');
  return whole;
}

t.test('framed responses: by length, chunked (extensions, trailers), none for HEAD, 204 and 304, to the close', async (t) => {
  let r = both(t, 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b \r\n\r\nhello');
  t.same(r.head, { status: 200, reason: 'OK', fields: ['Content-Length', '5', 'X-A', 'b'] });
  t.equal(r.body, 'hello');
  t.same(r.end, { keepAlive: true });
  r = both(t, 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n1\r\n!\r\n0\r\nX-T: 1\r\n\r\n');
  t.equal(r.body, 'hello!');
  t.same(r.end, { keepAlive: true });
  r = both(t, 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n', { head: true });
  t.same([r.body, r.end], ['', { keepAlive: true }], 'HEAD: no body whatever the length says');
  for (const status of [204, 304]) t.same(both(t, `HTTP/1.1 ${status} X\r\nContent-Length: 5\r\n\r\n`).end, { keepAlive: true }, `${status}: no body`);
  r = both(t, 'HTTP/1.1 200 OK\r\n\r\nall of it', { close: true });
  t.same([r.body, r.end], ['all of it', { keepAlive: false }], 'no framing: the body runs to the close');
  r = both(t, 'HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n');
  t.same([r.head?.reason, r.end], ['', { keepAlive: true }], 'a status line without a reason');
  // Only spaces and tabs are trimmed, at the ends: a no-break space (0xA0) is the value's own byte.
  r = both(t, 'HTTP/1.1 200 OK\r\ncOnTeNt-LeNgTh:\t 2 \t\r\nX-A: \t a \t b\t \r\nX-B:\r\nX-C: \t \r\nX-D: \xa0v\xa0\r\n\r\nok');
  t.same(r.head?.fields, ['cOnTeNt-LeNgTh', '2', 'X-A', 'a \t b', 'X-B', '', 'X-C', '', 'X-D', '\xa0v\xa0']);
  t.same([r.body, r.end], ['ok', { keepAlive: true }], 'a Content-Length in any case frames the body');
  r = both(t, 'HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: CHUNKED\r\nCONNECTION: CLOSE\r\n\r\n2\r\nok\r\n0\r\n\r\n');
  t.same([r.body, r.end], ['ok', { keepAlive: false }], 'Transfer-Encoding and Connection in any case');
});

t.test('interim 1xx heads are skipped; the final head follows', async (t) => {
  const r = both(t, 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok');
  t.same([r.head?.status, r.body, r.end], [201, 'ok', { keepAlive: true }]);
});

t.test('what ends keep-alive: HTTP/1.0, Connection: close, bytes after the response, the close', async (t) => {
  t.same(both(t, 'HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx').end, { keepAlive: false });
  t.same(both(t, 'HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 1\r\n\r\nx').end, { keepAlive: false });
  const r = read('HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil');
  t.same([r.body, r.end], ['x', { keepAlive: false }], 'a second response is never read as this one');
  const idle = new ResponseParser(1024);
  idle.feed(Buffer.from('HTTP/1.1 200 OK\r\n\r\n'));
  t.equal(idle.next()?.kind, 'error', 'bytes no request asked for');
});

t.test('every shape that cannot be framed for certain is an error', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['bare LF', 'HTTP/1.1 200 OK\nContent-Length: 1\n\nx', /bare LF/],
    ['bare LF in a field', 'HTTP/1.1 200 OK\r\nX: a\nb\r\nContent-Length: 1\r\n\r\nx', /bare/],
    ['bare CR', 'HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 1\r\n\r\nx', /bare CR/],
    ['a CR before a line end', 'HTTP/1.1 200 OK\r\nX: a\r\r\nContent-Length: 1\r\n\r\nx', /bare CR/],
    ['a CR before the head end', 'HTTP/1.1 200 OK\r\nContent-Length: 1\r\r\n\r\nx', /bare CR/],
    ['an LF after a line end', 'HTTP/1.1 200 OK\r\n\nX: a\r\nContent-Length: 1\r\n\r\nx', /bare/],
    ['obs-fold', 'HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nx', /folded/],
    ['space before the colon', 'HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx', /not a token/],
    ['no colon', 'HTTP/1.1 200 OK\r\nContent-Length\r\n\r\nx', /not a token/],
    ['HTTP/2', 'HTTP/2 200 OK\r\n\r\n', /status line/],
    ['lower-case version', 'http/1.1 200 OK\r\n\r\n', /status line/],
    ['two-digit status', 'HTTP/1.1 20 OK\r\n\r\n', /status line/],
    ['status 600', 'HTTP/1.1 600 OK\r\nContent-Length: 0\r\n\r\n', /not an HTTP status/],
    ['status 099', 'HTTP/1.1 099 OK\r\n\r\n', /not an HTTP status/],
    ['101', 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n', /101/],
    ['TE beside CL', 'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n', /beside/],
    ['HTTP/1.0 chunked', 'HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n', /HTTP\/1\.0 response with Transfer-Encoding/],
    ['gzip, chunked', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n', /other than chunked/],
    ['TE twice', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n', /twice/],
    ['CL not a number', 'HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n', /not a number/],
    ['CL list', 'HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx', /not a number/],
    ['CL negative', 'HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n', /not a number/],
    ['two CLs that differ', 'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx', /differ/],
    ['chunk size zz', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', /chunk-size/],
    ['chunk size -1', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n', /chunk-size/],
    ['chunk size past 2^52', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n', /chunk-size/],
    ['chunk size with a leading space', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n 1\r\nx\r\n0\r\n\r\n', /chunk-size/],
    ['a chunk without its CRLF', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n', /not followed by CRLF/],
    ['a bad trailer', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n', /trailer/],
  ];
  for (const [name, bytes, detail] of cases) {
    const r = read(bytes);
    t.match(r.error, detail, name);
    t.equal(r.end, undefined, `${name}: never complete`);
    t.equal(read(bytes, { piece: 1 }).error === undefined, false, `${name}: a byte at a time too`);
  }
});

t.test('sizes are capped: the head, a chunk-size line, the trailers', async (t) => {
  t.match(read(`HTTP/1.1 200 OK\r\nX: ${'a'.repeat(2000)}\r\n\r\n`).error, /larger than 1024/);
  t.match(read(`HTTP/1.1 200 OK\r\nX: ${'a'.repeat(2000)}`, { piece: 100 }).error, /larger than 1024/, 'without waiting for its end');
  t.match(read(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;${'e'.repeat(5000)}\r\nx\r\n`).error, /longer than 4096/);
  t.match(read(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n${'X-T: 1\r\n'.repeat(200)}\r\n`).error, /longer than/);
});

t.test('a close before the response is complete is an error, wherever it falls', async (t) => {
  for (const bytes of ['', 'HTTP/1.1 200 OK\r\n', 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n']) {
    const r = read(bytes, { close: true });
    t.match(r.error, /closed/, JSON.stringify(bytes.slice(-20)));
    t.equal(r.end, undefined);
  }
});

t.test('interim heads, and the field lines of a head or trailer section, are counted and capped', async (t) => {
  const interim = (n: number): string => 'HTTP/1.1 100 Continue\r\n\r\n'.repeat(n);
  t.same(read(`${interim(MAX_INTERIM_HEADS)}HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n`).end, { keepAlive: true }, 'up to the cap, in one buffer');
  t.match(read(`${interim(20_000)}HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n`, { max: 64 * 1024 }).error, /more than 32 interim/, 'past it, refused (not read to the end)');
  t.match(read(`${interim(MAX_INTERIM_HEADS + 1)}HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n`, { piece: 7 }).error, /interim/, 'in pieces too');
  const parser = new ResponseParser(1024);
  for (let i = 0; i < 3; i++) {
    parser.expect(false);
    parser.feed(Buffer.from(`${interim(MAX_INTERIM_HEADS)}HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n`));
    const events = [parser.next(), parser.next()];
    t.same(events.map((e) => e?.kind), ['head', 'end'], `response ${i + 1} on one connection: the count is each response's own`);
  }
  const fields = (n: number): string => 'A: 1\r\n'.repeat(n);
  t.same(read(`HTTP/1.1 200 OK\r\n${fields(MAX_FIELD_LINES - 1)}Content-Length: 0\r\n\r\n`, { max: 64 * 1024 }).end, { keepAlive: true }, `a head of ${MAX_FIELD_LINES} field lines`);
  t.match(read(`HTTP/1.1 200 OK\r\n${fields(MAX_FIELD_LINES)}Content-Length: 0\r\n\r\n`, { max: 64 * 1024 }).error, /more than 1000 field lines/, 'one more');
  const chunked = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n';
  t.same(read(`${chunked}${fields(MAX_FIELD_LINES)}\r\n`, { max: 1024 * 1024 }).end, { keepAlive: true }, `${MAX_FIELD_LINES} trailer lines`);
  t.match(read(`${chunked}${fields(10_000)}\r\n`, { max: 1024 * 1024 }).error, /trailer section has more than 1000/, 'ten thousand: refused');
});
