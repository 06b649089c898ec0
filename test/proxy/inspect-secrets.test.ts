/**
 * Secrets inside inspected connections, on loopback with real TLS at both ends: the workload holds
 * placeholders; the proxy sets a bound header to the real value, swaps a placeholder in a bound
 * host's headers (Basic credentials too, as git sends them), and refuses a placeholder anywhere
 * else (another inspected host, the URL, the body) `secret_wrong_host`, without the upstream ever
 * getting a complete request that carried one. No log line holds a value or a placeholder.
 */
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import zlib from 'node:zlib';
import t, { type Test } from 'tap';
import type { PolicyInput } from '../../policy/index.js';
import { fingerprint, loadSecrets } from '../../proxy/secrets/index.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { listenUntilEnd } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { policyOf, startTestProxy } from '../support/test-proxy.js';

const GITHUB = { value: 'ghp_REALrealREALrealREALrealREALreal1234', placeholder: 'ghp_PLACEHOLDERplaceholderPLACEHOLDER00' };
const NPM = { value: 'npm_REALnpmREALnpmREALnpmREALnpmREALnp', placeholder: 'npm_placeholderPLACEHOLDERplaceholder0' };

/** One character in IBM037 (EBCDIC): letters, digits, `_` and `=`, what the tests send. */
function ebcdic(c: string): number {
  const at = (from: string, base: number): number => base + c.charCodeAt(0) - from.charCodeAt(0);
  if (c >= 'a' && c <= 'i') return at('a', 0x81);
  if (c >= 'j' && c <= 'r') return at('j', 0x91);
  if (c >= 's' && c <= 'z') return at('s', 0xa2);
  if (c >= 'A' && c <= 'I') return at('A', 0xc1);
  if (c >= 'J' && c <= 'R') return at('J', 0xd1);
  if (c >= 'S' && c <= 'Z') return at('S', 0xe2);
  if (c >= '0' && c <= '9') return at('0', 0xf0);
  return c === '_' ? 0x6d : 0x7e;
}

const cert = selfSignedCert(['api.test', 'registry.test', 'paste.test']);
interface Seen {
  host: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  complete: boolean;
}
const seen: Seen[] = [];
const upstream = https.createServer(cert, (req, res) => {
  const entry: Seen = { host: req.headers.host ?? '', url: req.url ?? '', headers: req.headers, body: '', complete: false };
  seen.push(entry);
  req.on('data', (d: Buffer) => (entry.body += d.toString('latin1')));
  req.on('error', () => undefined);
  req.on('end', () => {
    entry.complete = true;
    // A server that reflects what it is sent: CORS that echoes the Origin (as the cors package's
    // `origin: true` does), and a page quoting a header in a long body, written in pieces.
    // An echo that compresses when asked to, as compression middleware does.
    if (req.url === '/gzip') {
      const text = Buffer.from(`you sent ${String(req.headers.authorization)}`);
      const gzip = String(req.headers['accept-encoding'] ?? '').includes('gzip');
      const body = gzip ? zlib.gzipSync(text) : text;
      res.writeHead(200, { 'Content-Length': String(body.length), ...(gzip ? { 'Content-Encoding': 'gzip' } : {}) }).end(body);
      return;
    }
    // An echo that honours Range, as a static or caching layer in front of one does.
    if (req.url === '/range') {
      const text = Buffer.from(`you sent ${String(req.headers.authorization)}`);
      // Apache httpd reads Request-Range (Netscape's draft spelling) when there is no Range.
      const range = /^bytes=(\d+)-(\d+)$/.exec(String(req.headers.range ?? req.headers['request-range'] ?? ''));
      if (range === null) {
        res.writeHead(200, { 'Content-Length': String(text.length) }).end(text);
        return;
      }
      const part = text.subarray(Number(range[1]), Number(range[2]) + 1);
      res.writeHead(206, { 'Content-Range': `bytes ${range[1]!}-${Number(range[1]) + part.length - 1}/${text.length}`, 'Content-Length': String(part.length) }).end(part);
      return;
    }
    // An echo that quotes a field cut to 80 characters, as a log or an error page might.
    if (req.url === '/cut') {
      const text = `you sent ${String(req.headers['x-request-id']).slice(0, 80)}`;
      res.writeHead(200, { 'Content-Length': String(text.length) }).end(text);
      return;
    }
    // One that quotes only the field's last 30 characters, as a masked display might.
    if (req.url === '/last') {
      const text = `key ending ...${String(req.headers['x-request-id']).slice(-30)}`;
      res.writeHead(200, { 'Content-Length': String(text.length) }).end(text);
      return;
    }
    // A JSON API behind body-parser: a charset it cannot decode is refused 415 with
    // `unsupported charset "X"`, the parameter upper-cased, and the API's error handler sends
    // that message back, as many do.
    if (req.url === '/json') {
      const charset = /;\s*charset=([^;\s]+)/i.exec(String(req.headers['content-type'] ?? ''))?.[1]?.toLowerCase() ?? 'utf-8';
      const text = charset.startsWith('utf-') ? '{}' : JSON.stringify({ error: `unsupported charset "${charset.toUpperCase()}"` });
      res.writeHead(charset.startsWith('utf-') ? 200 : 415, { 'Content-Type': 'application/json', 'Content-Length': String(text.length) }).end(text);
      return;
    }
    // An echo written in the charset the request asks for, as ASP.NET Core's JSON formatter
    // does by Accept-Charset (UTF-8 or UTF-16) and Spring's Jackson converter by Accept's charset
    // parameter (UTF-16 and UTF-32, either byte order).
    if (req.url === '/wide') {
      const asked = /charset=([\w-]+)/i.exec(String(req.headers.accept ?? ''))?.[1] ?? String(req.headers['accept-charset'] ?? 'utf-8');
      const text = Buffer.from(JSON.stringify({ id: req.headers['x-request-id'] }), 'latin1');
      const width = /32/.test(asked) ? 4 : /16|unicode/i.test(asked) ? 2 : 1;
      const body = Buffer.alloc(text.length * width);
      for (let i = 0; i < text.length; i += 1) body[i * width + (/be$/i.test(asked) ? width - 1 : 0)] = text[i]!;
      res.writeHead(200, { 'Content-Type': `application/json; charset=${asked}`, 'Content-Length': String(body.length) }).end(body);
      return;
    }
    // The same echo in EBCDIC (IBM037), which Spring's String converter writes when Accept asks
    // for it (any charset Java has) and an old Apache or IIS might by Accept-Charset.
    if (req.url === '/ebcdic') {
      const asked = /charset="?([\w-]+)/i.exec(String(req.headers.accept ?? ''))?.[1] ?? String(req.headers['accept-charset'] ?? 'utf-8');
      const text = `id=${String(req.headers['x-request-id'])}`;
      const body = /ibm037/i.test(asked) ? Buffer.from([...text].map(ebcdic)) : Buffer.from(text);
      res.writeHead(200, { 'Content-Type': `text/plain; charset=${asked}`, 'Content-Length': String(body.length) }).end(body);
      return;
    }
    if (req.url === '/cors') {
      res.writeHead(200, { 'Access-Control-Allow-Origin': req.headers.origin ?? '*', 'Content-Length': '3' }).end('ok\n');
      return;
    }
    if (req.url?.startsWith('/quote')) {
      const quoted = Buffer.from(`${'x'.repeat(20_000)} you sent ${String(req.headers.authorization ?? req.headers['x-api-key'])} ${'y'.repeat(100)}`);
      const cut = 20_000 + 12 + Number(new URL(req.url, 'http://x').searchParams.get('at') ?? 0);
      res.writeHead(200, { 'Content-Length': String(quoted.length) });
      res.write(quoted.subarray(0, cut));
      setTimeout(() => res.end(quoted.subarray(cut)), 50);
      return;
    }
    // TRACE answered as Apache httpd does by default: the request it got, headers and all.
    const text = req.method === 'TRACE' ? JSON.stringify(req.headers) : 'ok\n';
    res.writeHead(200, { 'Content-Length': String(text.length) }).end(text);
  });
});
const port = await listenUntilEnd(t, upstream);

const leaves = await testLeafIssuer();
const input: PolicyInput = {
  allowHosts: [
    { host: 'api.test', inspect: true, secrets: [{ name: 'GITHUB_TOKEN', header: 'Authorization', format: 'Bearer {}' }] },
    { host: 'registry.test', inspect: true, secrets: [{ name: 'NPM_TOKEN' }] },
    { host: 'paste.test', inspect: true },
  ],
  connectPorts: [port],
  testHosts: { 'api.test': '127.0.0.1', 'registry.test': '127.0.0.1', 'paste.test': '127.0.0.1' },
};
const proxy = await startTestProxy({ policy: input, inspection: { leaves, upstreamCa: [cert.cert] } });
t.teardown(() => proxy.close());
proxy.proxy.setPolicy(
  loadSecrets(policyOf(input), { GITHUB_TOKEN: GITHUB.value, EGRESS_PLACEHOLDER_GITHUB_TOKEN: GITHUB.placeholder, NPM_TOKEN: NPM.value, EGRESS_PLACEHOLDER_NPM_TOKEN: NPM.placeholder }, () => ''),
);

async function open(host: string): Promise<tls.TLSSocket> {
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.write(`CONNECT ${host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  await readUntil(socket, '\r\n\r\n', 3_000);
  const secure = tls.connect({ socket, servername: host, ca: leaves.caCertificatePem });
  await new Promise((r) => secure.once('secureConnect', r));
  return secure;
}

/** One request on a new inspected connection to `host`; the response's text. */
async function send(host: string, head: string, body = ''): Promise<string> {
  const secure = await open(host);
  const length = body === '' ? '' : `Content-Length: ${body.length}\r\n`;
  secure.write(`${head.replace('HOST', `${host}:${port}`)}${length}Connection: close\r\n\r\n${body}`);
  const text = await readUntil(secure, undefined, 5_000);
  secure.destroy();
  return text;
}

function noLeak(t: Test): void {
  const logs = JSON.stringify(proxy.logs);
  for (const s of [GITHUB, NPM]) {
    t.notOk(logs.includes(s.value), 'no log line holds a value');
    t.notOk(logs.includes(s.placeholder), 'no log line holds a placeholder');
  }
}

t.test('a bound header is set to the real value, whatever the workload sent, and the line names it by fingerprint', async (t) => {
  const before = seen.length;
  for (const sent of [`Authorization: Bearer ${GITHUB.placeholder}\r\n`, '', 'Authorization: token something-else\r\nauthorization: Basic eDp5\r\n']) {
    t.match(await send('api.test', `GET /user HTTP/1.1\r\nHost: HOST\r\n${sent}`), /^HTTP\/1\.1 200 /);
  }
  const got = seen.slice(before);
  t.equal(got.length, 3);
  for (const s of got) t.equal(s.headers.authorization, `Bearer ${GITHUB.value}`, 'exactly one Authorization, the real one');
  const line = proxy.logs.filter((l) => l.event === 'decision' && l.method === 'GET').at(-1);
  t.match(line, { decision: 'allow', via: 'inspect', secrets: [`GITHUB_TOKEN ${fingerprint(GITHUB.value)}`] });
  noLeak(t);
});

t.test('a placeholder in a bound host\'s headers is swapped, in Basic credentials too', async (t) => {
  const before = seen.length;
  const basic = Buffer.from(`x-access-token:${NPM.placeholder}`).toString('base64');
  t.match(await send('registry.test', `GET /pkg HTTP/1.1\r\nHost: HOST\r\nX-Api-Key: ${NPM.placeholder}\r\nAuthorization: Basic ${basic}\r\n`), /^HTTP\/1\.1 200 /);
  const got = seen[before]!;
  t.equal(got.headers['x-api-key'], NPM.value);
  t.equal(Buffer.from(String(got.headers.authorization).replace('Basic ', ''), 'base64').toString(), `x-access-token:${NPM.value}`);
  noLeak(t);
});

t.test('a placeholder anywhere else is refused secret_wrong_host, and the upstream never gets a complete request with it', async (t) => {
  const before = seen.length;
  const cases: [string, string, string][] = [
    ['paste.test', `GET /p HTTP/1.1\r\nHost: HOST\r\nAuthorization: Bearer ${GITHUB.placeholder}\r\n`, ''],
    ['registry.test', `GET /p HTTP/1.1\r\nHost: HOST\r\nX-Token: ${GITHUB.placeholder}\r\n`, ''],
    ['api.test', `GET /p?t=${GITHUB.placeholder} HTTP/1.1\r\nHost: HOST\r\n`, ''],
    ['api.test', `GET /p?t=${encodeURIComponent(GITHUB.placeholder).replace(/_/g, '%5F')} HTTP/1.1\r\nHost: HOST\r\n`, ''],
    ['paste.test', `POST /p HTTP/1.1\r\nHost: HOST\r\n`, `{"note":"${'x'.repeat(70_000)}${NPM.placeholder}"}`],
  ];
  for (const [host, head, body] of cases) {
    t.match(await send(host, head, body), /^HTTP\/1\.1 403 .*X-Egress-Reason: secret_wrong_host/s, `${host}: ${head.split('\r\n')[0]!.slice(0, 40)}`);
  }
  t.notOk(seen.slice(before).some((s) => s.complete), 'no complete request reached the upstream');
  t.notOk(seen.slice(before).some((s) => JSON.stringify(s).includes(GITHUB.value) || JSON.stringify(s).includes(NPM.value)), 'no value reached it');
  noLeak(t);
});

t.test('TRACE, whose answer is the request itself, is refused where a secret would go in, and reaches nothing', async (t) => {
  const before = seen.length;
  // A server that honours TRACE (Apache httpd's default) would echo the real value back.
  for (const head of ['TRACE /user HTTP/1.1\r\nHost: HOST\r\n', `TRACE /pkg HTTP/1.1\r\nHost: HOST\r\nX-Api-Key: ${NPM.placeholder}\r\n`]) {
    const host = head.startsWith('TRACE /user') ? 'api.test' : 'registry.test';
    const answer = await send(host, head);
    t.match(answer, /^HTTP\/1\.1 403 .*X-Egress-Reason: method_not_allowed/s, `${host}: ${head.split('\r\n')[0]!}`);
    t.notOk(answer.includes(GITHUB.value) || answer.includes(NPM.value), 'no value echoed back to the workload');
  }
  t.equal(seen.length, before, 'the upstream got neither');
  t.match(await send('paste.test', 'TRACE /p HTTP/1.1\r\nHost: HOST\r\n'), /^HTTP\/1\.1 200 /, 'a host with no secret gets its TRACE');
  noLeak(t);
});

t.test('a request a secret went into asks for an uncompressed response, so a reflected value is seen and cut', async (t) => {
  const before = seen.length;
  for (const asked of ['Accept-Encoding: gzip\r\n', 'accept-encoding: identity\r\nACCEPT-ENCODING: gzip, deflate, br\r\n']) {
    const answer = await send('api.test', `GET /gzip HTTP/1.1\r\nHost: HOST\r\n${asked}`);
    const split = answer.indexOf('\r\n\r\n');
    t.notMatch(answer.slice(0, split), /content-encoding/i, 'not compressed');
    t.notOk(answer.includes(GITHUB.value), 'the value does not reach the workload');
    t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'the plain echo is refused');
  }
  t.same(seen.slice(before).map((s) => s.headers['accept-encoding']), ['identity', 'identity'], 'the upstream was asked for identity alone');
  const clean = seen.length;
  await send('paste.test', 'GET /p HTTP/1.1\r\nHost: HOST\r\nAccept-Encoding: gzip\r\n');
  t.equal(seen[clean]!.headers['accept-encoding'], 'gzip', 'a request without a secret keeps its Accept-Encoding');
  noLeak(t);
});

t.test('a request a secret went into asks for the whole response, so a reflected value cannot come back in byte ranges', async (t) => {
  const before = seen.length;
  // Each range alone holds part of the value, which a watch of one response cannot know.
  const pieces: string[] = [];
  for (const range of ['bytes=0-25', 'bytes=26-200']) {
    const answer = await send('api.test', `GET /range HTTP/1.1\r\nHost: HOST\r\nRange: ${range}\r\nIf-Range: "v1"\r\n`);
    pieces.push(answer.slice(answer.indexOf('\r\n\r\n') + 4));
    t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, `${range}: the whole echo came back, and was refused`);
  }
  t.notOk(pieces.join('').includes(GITHUB.value.slice(8)), 'no piece of the value reached the workload');
  t.same(seen.slice(before).map((s) => [s.headers.range, s.headers['if-range']]), [[undefined, undefined], [undefined, undefined]], 'the upstream got neither Range nor If-Range');
  // The same through Request-Range, which Apache httpd honours when there is no Range: ranges
  // cut at both ends, each under a quarter of the value, would pass the watch one by one.
  const legacy = seen.length;
  let joined = '';
  for (let at = 0; at < 16 + GITHUB.value.length; at += 9) {
    const answer = await send('api.test', `GET /range HTTP/1.1\r\nHost: HOST\r\nRequest-Range: bytes=${at}-${at + 8}\r\n`);
    joined += /^HTTP\/1\.1 206 /.test(answer) ? answer.slice(answer.indexOf('\r\n\r\n') + 4) : '';
  }
  t.notOk(joined.includes(GITHUB.value), 'the value is not handed back in pieces');
  t.ok(seen.slice(legacy).every((s) => s.headers['request-range'] === undefined), 'the upstream got no Request-Range');
  const clean = seen.length;
  await send('paste.test', 'GET /p HTTP/1.1\r\nHost: HOST\r\nRange: bytes=0-1\r\n');
  t.equal(seen[clean]!.headers.range, 'bytes=0-1', 'a request without a secret keeps its Range');
  noLeak(t);
});

t.test('an echo cut short never hands back most of a value: a piece holding its first or last bytes is refused', async (t) => {
  // The value's first 38 characters, its last 29: each alone is no value whole, and the two
  // together are all of it.
  const first = await send('registry.test', `GET /cut HTTP/1.1\r\nHost: HOST\r\nX-Request-Id: ${'p'.repeat(80 - (NPM.value.length - 1))}${NPM.placeholder}\r\n`);
  t.notOk(first.includes(NPM.value.slice(0, 12)), 'the value\'s start is not handed back');
  t.match(first, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  const last = await send('registry.test', `GET /last HTTP/1.1\r\nHost: HOST\r\nX-Request-Id: ${NPM.placeholder}p\r\n`);
  t.notOk(last.includes(NPM.value.slice(-12)), 'the value\'s end is not handed back');
  t.match(last, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  // A few characters of an end (a display of the last four, say) still pass.
  const four = await send('registry.test', `GET /last HTTP/1.1\r\nHost: HOST\r\nX-Request-Id: ${NPM.placeholder}${'p'.repeat(26)}\r\n`);
  t.match(four, /^HTTP\/1\.1 200 .*key ending \.\.\.[a-zA-Z]{4}p{26}$/s, 'the last four characters pass');
  noLeak(t);
});

t.test('an echo in another case never hands back a value: a case-insensitive value, or a hex one, reads the same', async (t) => {
  // body-parser upper-cases the charset it quotes: a lower-case hex key comes back whole, and
  // a mixed-case one with only its letters' case lost.
  const answer = await send('registry.test', `POST /json HTTP/1.1\r\nHost: HOST\r\nContent-Type: application/json; charset=${NPM.placeholder}\r\n`, '{}');
  t.notOk(answer.toLowerCase().includes(NPM.value.toLowerCase().slice(0, 12)), 'the value, upper-cased, does not reach the workload');
  t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  // Its first characters alone, in another case, in a field: refused too.
  const cors = await send('registry.test', `GET /cors HTTP/1.1\r\nHost: HOST\r\nOrigin: https://${NPM.placeholder}\r\n`);
  t.match(cors, /^HTTP\/1\.1 502 /, 'the echo as sent is refused still');
  t.match(await send('registry.test', 'POST /json HTTP/1.1\r\nHost: HOST\r\nContent-Type: application/json; charset=latin-9\r\n', '{}'), /^HTTP\/1\.1 415 .*LATIN-9/s, 'an echo without a value passes');
  noLeak(t);
});

t.test('an echo in UTF-16 or UTF-32 never hands back a value: its characters with zero bytes between them are read as the value', async (t) => {
  for (const asked of ['Accept-Charset: utf-16', 'Accept: application/json; charset=UTF-16BE', 'Accept: application/json; charset=UTF-32BE', 'Accept: application/json; charset=UTF-32LE']) {
    const answer = await send('registry.test', `GET /wide HTTP/1.1\r\nHost: HOST\r\n${asked}\r\nX-Request-Id: ${NPM.placeholder}\r\n`);
    t.notOk(answer.replace(/\0/g, '').includes(NPM.value.slice(0, 12)), `${asked}: the value does not reach the workload`);
    t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, `${asked}: refused as a bad upstream response`);
  }
  const clean = await send('registry.test', `GET /wide HTTP/1.1\r\nHost: HOST\r\nAccept-Charset: utf-16\r\nX-Request-Id: ${'n'.repeat(40)}\r\n`);
  t.match(clean, /^HTTP\/1\.1 200 /, 'a wide echo without a value passes');
  t.ok(clean.endsWith(Buffer.from(JSON.stringify({ id: 'n'.repeat(40) }), 'utf16le').toString('latin1')), 'byte for byte');
  noLeak(t);
});

t.test('a request a secret went into names no charset, so a host that writes in the one asked for writes the value as it is', async (t) => {
  const before = seen.length;
  for (const asked of ['Accept-Charset: IBM037', 'Accept: text/plain; charset=IBM037', 'Accept: text/plain;q=0.9;CHARSET="ibm037"']) {
    const answer = await send('registry.test', `GET /ebcdic HTTP/1.1\r\nHost: HOST\r\n${asked}\r\nX-Request-Id: ${NPM.placeholder}\r\n`);
    t.notOk(answer.includes(Buffer.from([...NPM.value.slice(0, 12)].map(ebcdic)).toString('latin1')), `${asked}: the value in EBCDIC does not reach the workload`);
    t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, `${asked}: the echo, as it is, refused`);
  }
  t.same(seen.slice(before).map((s) => [s.headers['accept-charset'], s.headers.accept]), [[undefined, undefined], [undefined, undefined], [undefined, undefined]], 'the upstream got no charset to write in');
  const clean = seen.length;
  await send('paste.test', 'GET /p HTTP/1.1\r\nHost: HOST\r\nAccept-Charset: IBM037\r\nAccept: text/plain; charset=IBM037\r\n');
  t.same([seen[clean]!.headers['accept-charset'], seen[clean]!.headers.accept], ['IBM037', 'text/plain; charset=IBM037'], 'a request without a secret keeps them');
  await send('registry.test', `GET /p HTTP/1.1\r\nHost: HOST\r\nAccept: application/json\r\nX-Request-Id: ${NPM.placeholder}\r\n`);
  t.equal(seen.at(-1)!.headers.accept, 'application/json', 'an Accept without a charset is kept');
  noLeak(t);
});

t.test('a response that reflects Basic credentials the proxy put a value into never hands back their encoding', async (t) => {
  // The value swapped inside Basic credentials goes out base64-encoded, in whatever field the
  // sandbox put them: a host that reflects the field would hand back the value, base64-encoded.
  const sent = (prefix: string): string => Buffer.from(`${prefix}${NPM.placeholder}`).toString('base64');
  const encoded = (prefix: string): string => Buffer.from(`${prefix}${NPM.value}`).toString('base64');
  const cors = await send('registry.test', `GET /cors HTTP/1.1\r\nHost: HOST\r\nOrigin: Basic ${sent('')}\r\n`);
  t.notOk(cors.includes(encoded('')), 'the encoded value echoed in a response field does not reach the workload');
  t.match(cors, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  for (const at of [-30, 5, 40]) {
    const quote = await send('registry.test', `GET /quote?at=${at} HTTP/1.1\r\nHost: HOST\r\nAuthorization: Basic ${sent('x-access-token:')}\r\n`);
    t.notOk(quote.includes(encoded('x-access-token:')), `split at ${at}: the encoded credentials quoted in a body do not reach the workload`);
    t.notOk(quote.includes(`you sent Basic ${encoded('x-access-token:').slice(0, 8)}`), `split at ${at}: not even their start`);
  }
  // A quote cut short of the credentials' end still holds the value's encoding whole: a
  // prefix of three bytes puts it on a base64 boundary, and padding after it is cut away.
  const cutAnswer = await send('registry.test', `GET /cut HTTP/1.1\r\nHost: HOST\r\nX-Request-Id: Basic ${Buffer.from(`abc${NPM.placeholder}${'x'.repeat(60)}`).toString('base64')}\r\n`);
  t.notOk(cutAnswer.includes(Buffer.from(`abc${NPM.value}`).toString('base64').slice(4, 52)), 'a quote cut after the value does not hand back its encoding');
  t.match(cutAnswer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  // The value's encoding reads one of three ways whatever is put around it: twenty fields with
  // twenty prefixes are three encodings to watch for, and pass.
  const many = Array.from({ length: 20 }, (_, i) => `X-C${i}: Basic ${sent(`${'u'.repeat(i)}:`)}\r\n`).join('');
  t.match(await send('registry.test', `GET /pkg HTTP/1.1\r\nHost: HOST\r\n${many}`), /^HTTP\/1\.1 200 /, 'twenty encoded credentials pass');
  noLeak(t);
});

t.test('a response that reflects a secret the proxy put in never hands it to the workload: its head is refused, its body cut before the value', async (t) => {
  const cors = await send('registry.test', `GET /cors HTTP/1.1\r\nHost: HOST\r\nOrigin: https://${NPM.placeholder}\r\n`);
  t.notOk(cors.includes(NPM.value), 'the value echoed in a response field does not reach the workload');
  t.match(cors, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  // The value whole in one piece, and split across two pieces at several places.
  for (const at of [-30, 5, 20, 39]) {
    const quote = await send('api.test', `GET /quote?at=${at} HTTP/1.1\r\nHost: HOST\r\n`);
    t.notOk(quote.includes(GITHUB.value), `split at ${at}: the value quoted in a body does not reach the workload`);
    // Whatever of the body went out before the value, no piece of the value went with it.
    t.notOk(quote.includes('Bearer ghp_'), `split at ${at}: not even its start`);
  }
  const line = proxy.logs.filter((l) => l.event === 'decision' && l.via === 'inspect').at(-1);
  t.match(line, { secrets: [`GITHUB_TOKEN ${fingerprint(GITHUB.value)}`] }, 'the line names the secret by fingerprint');
  noLeak(t);
});
