/**
 * The fast CONNECT head reader: what it accepts, Node's HTTP parser accepts too and reads the
 * same way (checked against a real Node HTTP server on loopback); everything else is left to
 * that parser.
 */
import http from 'node:http';
import net from 'node:net';
import fc from 'fast-check';
import t from 'tap';
import { readConnectHead } from '../../proxy/index.js';

const accepted: { name: string; head: string; target: string }[] = [
  { name: 'plain', head: 'CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n', target: 'a.example:443' },
  { name: 'HTTP/1.0, no fields', head: 'CONNECT a.example:443 HTTP/1.0\r\n\r\n', target: 'a.example:443' },
  { name: 'bracketed IPv6 target (refused later, as a literal)', head: 'CONNECT [::1]:443 HTTP/1.1\r\n\r\n', target: '[::1]:443' },
  { name: 'several fields, empty value, no space', head: 'CONNECT a.example:443 HTTP/1.1\r\nUser-Agent: curl/8.0\r\nX-Empty:\r\nProxy-Connection:Keep-Alive\r\n\r\n', target: 'a.example:443' },
];
for (const c of accepted) {
  t.test(`accepted: ${c.name}`, async (t) => {
    const tail = Buffer.from('\x16\x03\x01');
    const read = readConnectHead(Buffer.concat([Buffer.from(c.head, 'latin1'), tail]), 16_384);
    t.same(read, { target: c.target, length: c.head.length });
  });
}

const left: { name: string; head: string }[] = [
  { name: 'another method', head: 'GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n' },
  { name: 'lower-case method', head: 'connect a.example:443 HTTP/1.1\r\n\r\n' },
  { name: 'incomplete head', head: 'CONNECT a.example:443 HTTP/1.1\r\nHost: a' },
  { name: 'bare LF', head: 'CONNECT a.example:443 HTTP/1.1\nHost: a\n\n' },
  { name: 'HTTP/2', head: 'CONNECT a.example:443 HTTP/2.0\r\n\r\n' },
  { name: 'two spaces', head: 'CONNECT  a.example:443 HTTP/1.1\r\n\r\n' },
  { name: 'a percent in the target', head: 'CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n' },
  { name: 'userinfo in the target', head: 'CONNECT u@a.example:443 HTTP/1.1\r\n\r\n' },
  { name: 'a slash in the target', head: 'CONNECT a.example:443/x HTTP/1.1\r\n\r\n' },
  { name: 'Content-Length', head: 'CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n' },
  { name: 'Transfer-Encoding in any case', head: 'CONNECT a.example:443 HTTP/1.1\r\ntransfer-ENCODING: chunked\r\n\r\n' },
  { name: 'obs-fold', head: 'CONNECT a.example:443 HTTP/1.1\r\nX: a\r\n b\r\n\r\n' },
  { name: 'a space before the colon', head: 'CONNECT a.example:443 HTTP/1.1\r\nHost : a\r\n\r\n' },
  { name: 'a control byte in a value', head: 'CONNECT a.example:443 HTTP/1.1\r\nX: a\x01b\r\n\r\n' },
  { name: 'a tab inside a value', head: 'CONNECT a.example:443 HTTP/1.1\r\nX: a\tb\r\n\r\n' },
  { name: 'obs-text in a value', head: 'CONNECT a.example:443 HTTP/1.1\r\nX: caf\xe9\r\n\r\n' },
  { name: 'a line without a colon', head: 'CONNECT a.example:443 HTTP/1.1\r\nnonsense\r\n\r\n' },
];
for (const c of left) {
  t.test(`left to the full parser: ${c.name}`, async (t) => t.equal(readConnectHead(Buffer.from(c.head, 'latin1'), 16_384), undefined));
}

t.test('a head over the size limit is left to the full parser (which answers 431)', async (t) => {
  const head = `CONNECT a.example:443 HTTP/1.1\r\nX: ${'a'.repeat(200)}\r\n\r\n`;
  t.equal(readConnectHead(Buffer.from(head), 100), undefined);
  t.ok(readConnectHead(Buffer.from(head), 16_384));
});

t.test('whatever it accepts, Node parses as a CONNECT with the same target and no body', async (t) => {
  const seen: { url: string | undefined; length: string | undefined; encoding: string | undefined }[] = [];
  const server = http.createServer();
  server.on('connect', (req: http.IncomingMessage, socket: net.Socket) => {
    seen.push({ url: req.url, length: req.headers['content-length'], encoding: req.headers['transfer-encoding'] });
    socket.destroy();
  });
  server.on('clientError', (_err, socket: net.Socket) => {
    seen.push({ url: undefined, length: undefined, encoding: undefined });
    socket.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const port = (server.address() as net.AddressInfo).port;
  const ask = (bytes: Buffer): Promise<void> =>
    new Promise((resolve) => {
      const before = seen.length;
      const s = net.connect(port, '127.0.0.1', () => s.write(bytes));
      s.on('error', () => undefined);
      s.on('close', () => {
        const wait = (): void => void (seen.length > before ? resolve() : setTimeout(wait, 5));
        wait();
      });
    });
  const unit = fc.constantFrom(...'aZ09.-_:[]@/%? \t\r\n\x00\x7f\xe9'.split(''), 'CONNECT ', ' HTTP/1.1', '\r\n', 'Host: ', 'Content-Length: 1', ': ');
  const loose = fc.tuple(fc.constantFrom('CONNECT a.example:443 HTTP/1.1\r\n', 'CONNECT '), fc.array(unit, { maxLength: 12 }), fc.constantFrom('\r\n\r\n', '\r\n', '')).map(([a, b, c]) => a + b.join('') + c);
  const chars = (alphabet: string, max: number) => fc.string({ unit: fc.constantFrom(...alphabet.split('')), maxLength: max });
  const field = fc.tuple(chars('aZ09-_.!#~', 8), chars(': \t', 2), chars('aZ09 .:/;=,\t"', 12)).map(([n, sep, v]) => `${n}${sep}${v}`);
  const shaped = fc
    .tuple(chars('aZ09.-_:[]', 20), fc.constantFrom('0', '1'), fc.array(field, { maxLength: 5 }))
    .map(([target, minor, fields]) => `CONNECT ${target} HTTP/1.${minor}\r\n${fields.map((f) => `${f}\r\n`).join('')}\r\n`);
  const heads = fc.oneof(loose, shaped);
  let checked = 0;
  await fc.assert(
    fc.asyncProperty(heads, async (head) => {
      const bytes = Buffer.from(head, 'latin1');
      const read = readConnectHead(bytes, 16_384);
      if (read === undefined) return true;
      checked += 1;
      await ask(bytes);
      const got = seen.at(-1);
      return got?.url === read.target && got.length === undefined && got.encoding === undefined;
    }),
    { numRuns: 600, seed: 21 },
  );
  t.ok(checked > 50, `${checked} accepted heads compared with Node's parser`);
});

t.test('no head makes the reader backtrack: a line of 16 KiB of blanks is read in linear time', async (t) => {
  const head = Buffer.from(`CONNECT a.b:443 HTTP/1.1\r\nX:${' '.repeat(16_300)}\x7f\r\n\r\n`, 'latin1');
  // Quadratic matching took about 200 ms here; linear takes well under one. The best of five
  // runs, so a preemption or a GC pause on a loaded machine is not taken for backtracking.
  let ms = Infinity;
  for (let run = 0; run < 5; run += 1) {
    const started = performance.now();
    t.equal(readConnectHead(head, 32_768), undefined);
    ms = Math.min(ms, performance.now() - started);
  }
  t.ok(ms < 20, `${ms.toFixed(2)} ms`);
});
