/**
 * A digest of a reflected response, in its head. The value watch reads the body as it comes and
 * cuts it at a value, but the head goes out at the first body bytes, and a head may carry a hash
 * of the whole body: an ETag (Express's default is a SHA-1 of the body), Content-MD5, or an RFC
 * 9530 digest. With a host that quotes a field cut to a length (inspect-secrets.test.ts, `/cut`),
 * the sandbox places the value so that the cut falls after its first k characters, for k = 1, 2,
 * ...: each head hashes a body the sandbox knows but for one character of the value, found by
 * trying the few dozen it can be. Every piece past the watch's quarter is cut from the body, and
 * its head hands it over anyway (review finding).
 */
import { createHash } from 'node:crypto';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import type { PolicyInput } from '../../policy/index.js';
import { loadSecrets } from '../../proxy/secrets/index.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { listenUntilEnd } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { policyOf, startTestProxy } from '../support/test-proxy.js';

const NPM = { value: 'npm_REALnpmREALnpmREALnpmREALnpmREALnp', placeholder: 'npm_placeholderPLACEHOLDERplaceholder0' };
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_';
const PAD = 'x'.repeat(20_000);
const CUT = 80;

/** The body the host sends for a field: a long page, then the field quoted cut to CUT characters. */
function page(field: string): string {
  return `${PAD} you sent ${field.slice(0, CUT)}`;
}

function digest(body: string): string {
  return `"${createHash('sha256').update(body, 'latin1').digest('base64')}"`;
}

const cert = selfSignedCert(['registry.test']);
// A page that quotes a field cut short, with a strong ETag of its body, written in two pieces.
const upstream = https.createServer(cert, (req, res) => {
  req.resume();
  req.on('end', () => {
    const body = page(String(req.headers['x-request-id']));
    // Conditional as Express's req.fresh is: 304 when If-None-Match names the body's ETag.
    if (req.headers['if-none-match'] === digest(body)) {
      res.writeHead(304, { ETag: digest(body) }).end();
      return;
    }
    res.writeHead(200, { 'Content-Length': String(body.length), ETag: digest(body), 'Repr-Digest': `sha-256=:${digest(body).slice(1, -1)}:` });
    res.write(body.slice(0, PAD.length));
    setTimeout(() => res.end(body.slice(PAD.length)), 30);
  });
});
const port = await listenUntilEnd(t, upstream);

const leaves = await testLeafIssuer();
const input: PolicyInput = {
  allowHosts: [{ host: 'registry.test', inspect: true, secrets: [{ name: 'NPM_TOKEN' }] }],
  connectPorts: [port],
  testHosts: { 'registry.test': '127.0.0.1' },
};
const proxy = await startTestProxy({ policy: input, inspection: { leaves, upstreamCa: [cert.cert] } });
t.teardown(() => proxy.close());
proxy.proxy.setPolicy(loadSecrets(policyOf(input), { NPM_TOKEN: NPM.value, EGRESS_PLACEHOLDER_NPM_TOKEN: NPM.placeholder }, () => ''));

/** The response's head to one request with `field` as X-Request-Id, on a new inspected connection. */
async function headFor(field: string, extra = ''): Promise<string> {
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.write(`CONNECT registry.test:${port} HTTP/1.1\r\nHost: registry.test:${port}\r\n\r\n`);
  await readUntil(socket, '\r\n\r\n', 3_000);
  const secure = tls.connect({ socket, servername: 'registry.test', ca: leaves.caCertificatePem });
  await new Promise((r) => secure.once('secureConnect', r));
  secure.write(`GET /page HTTP/1.1\r\nHost: registry.test:${port}\r\nX-Request-Id: ${field}\r\n${extra}Connection: close\r\n\r\n`);
  const text = await readUntil(secure, undefined, 5_000).catch(() => '');
  secure.destroy();
  return text.split('\r\n\r\n')[0] ?? '';
}

t.test('a response to a request a secret went into carries no digest of its body', async (t) => {
  let known = '';
  for (let k = 1; k <= NPM.value.length; k++) {
    // The placeholder's length is the value's: the cut falls after the value's first k characters.
    const head = await headFor(`${'p'.repeat(CUT - k)}${NPM.placeholder}`);
    const tag = /^etag: (.*)$/im.exec(head)?.[1];
    const next = tag === undefined ? undefined : [...ALPHABET].find((c) => digest(page(`${'p'.repeat(CUT - k)}${known}${c}`)) === tag);
    if (next === undefined) break;
    known += next;
  }
  t.not(known, NPM.value, `the value is not read back from the heads (${known.length} of ${NPM.value.length} characters)`);
  t.ok(known.length < 10, 'no more than the watch lets the body show');
  // The value goes in, past the cut: the page quotes none of it.
  const head = await headFor(`${'p'.repeat(CUT)}${NPM.placeholder}`);
  t.match(head, /^HTTP\/1\.1 200 /, 'the page is passed on');
  t.notMatch(head, /^(etag|repr-digest|content-digest|digest|content-md5):/im, 'no field that hashes the body');
});

t.test('a request a secret went into asks nothing conditional on a digest of the body', async (t) => {
  // The same oracle without the field: If-None-Match names the digest of a guessed body, and a
  // 304 says the guess was right, a character at a time.
  let known = '';
  for (let k = 1; k <= 12; k++) {
    const field = `${'p'.repeat(CUT - k)}${NPM.placeholder}`;
    let next: string | undefined;
    for (const c of ALPHABET) {
      const head = await headFor(field, `If-None-Match: ${digest(page(`${'p'.repeat(CUT - k)}${known}${c}`))}\r\n`);
      if (/^HTTP\/1\.1 304 /.test(head)) {
        next = c;
        break;
      }
    }
    if (next === undefined) break;
    known += next;
  }
  t.equal(known, '', `no character is confirmed by a 304 (${known.length} were)`);
});
