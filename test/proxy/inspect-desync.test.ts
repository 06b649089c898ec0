/**
 * A bound host that reads one request's body as requests of its own (a CL.0 desync: it answers a
 * GET without reading the body its Content-Length announces) and has an endpoint that echoes what
 * it is sent. Through one upstream connection the workload could plant a request that swallows
 * the next request the proxy sends, one with a secret in it, and have the echo answer a later
 * request, one the proxy watches for no value. On loopback, with real TLS at both ends.
 */
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import type { PolicyInput } from '../../policy/index.js';
import { loadSecrets } from '../../proxy/secrets/index.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { listen } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { policyOf, startTestProxy } from '../support/test-proxy.js';

const NPM = { value: 'npm_REALnpmREALnpmREALnpmREALnpmREALnp', placeholder: 'npm_placeholderPLACEHOLDERplaceholder0' };

const cert = selfSignedCert(['api.test']);

function respond(socket: tls.TLSSocket, body: string): void {
  socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
}

/**
 * A naive HTTP/1.1 server, one request at a time from the bytes of its connection: a GET is
 * answered without reading any body (CL.0), `/slow` after 200 ms; a POST to `/echo` gets back its
 * body, after 300 ms; a request line it cannot read gets a 400 and the connection is closed.
 */
/** The requests each upstream connection carried, by request line, in order. */
const carried: string[][] = [];

function naive(socket: tls.TLSSocket): void {
  const lines: string[] = [];
  carried.push(lines);
  let pending = '';
  let busy = false;
  const next = (): void => {
    if (busy) return;
    const end = pending.indexOf('\r\n\r\n');
    if (end === -1) return;
    const head = pending.slice(0, end);
    const line = /^(GET|POST) (\S+) HTTP\/1\.1$/.exec(head.slice(0, head.indexOf('\r\n')));
    if (line === null) {
      socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      return;
    }
    const length = line[2] === '/static' ? 0 : Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (pending.length < end + 4 + length) return;
    lines.push(`${line[1]} ${line[2]}`);
    const body = pending.slice(end + 4, end + 4 + length);
    pending = pending.slice(end + 4 + length);
    busy = true;
    const done = (text: string): void => {
      respond(socket, text);
      busy = false;
      next();
    };
    if (line[2] === '/echo') setTimeout(() => done(body), 300);
    else if (line[2] === '/slow') setTimeout(() => done('slow'), 200);
    else setTimeout(() => done('ok'), 50);
  };
  socket.on('data', (chunk: Buffer) => {
    pending += chunk.toString('latin1');
    next();
  });
  socket.on('error', () => undefined);
}

const upstream = tls.createServer(cert, naive);
const port = await listen(upstream as unknown as net.Server);
t.teardown(() => upstream.close());

const leaves = await testLeafIssuer();
const input: PolicyInput = {
  allowHosts: [{ host: 'api.test', inspect: true, secrets: [{ name: 'NPM_TOKEN' }] }],
  connectPorts: [port],
  testHosts: { 'api.test': '127.0.0.1' },
};
const proxy = await startTestProxy({ policy: input, inspection: { leaves, upstreamCa: [cert.cert] } });
t.teardown(() => proxy.close());
proxy.proxy.setPolicy(loadSecrets(policyOf(input), { NPM_TOKEN: NPM.value, EGRESS_PLACEHOLDER_NPM_TOKEN: NPM.placeholder }, () => ''));

t.test('a request a secret went into never shares an upstream connection: a desync cannot hand its echo to another request', async (t) => {
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.write(`CONNECT api.test:${port} HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`);
  await readUntil(socket, '\r\n\r\n', 3_000);
  const secure = tls.connect({ socket, servername: 'api.test', ca: leaves.caCertificatePem });
  await new Promise((r) => secure.once('secureConnect', r));
  const host = `Host: api.test:${port}\r\n`;
  // The planted requests: /slow answers the request that follows (the one with the secret), and
  // /echo swallows that request's first 130 bytes and answers the one after it.
  const planted = `GET /slow HTTP/1.1\r\n${host}\r\nPOST /echo HTTP/1.1\r\n${host}Content-Length: 130\r\n\r\n`;
  let seen = '';
  secure.on('data', (d: Buffer) => (seen += d.toString('latin1')));
  const answered = async (count: number): Promise<void> => {
    for (let waited = 0; (seen.match(/\r\n\r\n/g) ?? []).length < count && waited < 3_000; waited += 10) await new Promise((r) => setTimeout(r, 10));
    // The upstream connection is free again once undici's next turn has run.
    await new Promise((r) => setTimeout(r, 30));
  };
  secure.write(`POST /static HTTP/1.1\r\n${host}Content-Length: ${planted.length}\r\n\r\n${planted}`);
  await answered(1);
  secure.write(`GET /user HTTP/1.1\r\nX-Api-Key: ${NPM.placeholder}\r\n${host}\r\n`);
  await answered(2);
  secure.write(`GET /other HTTP/1.1\r\n${host}\r\n`);
  await answered(3);
  secure.destroy();
  t.notOk(seen.includes(NPM.value), 'the value does not reach the workload');
  t.match(seen, /^HTTP\/1\.1 200 [^]*\r\n\r\nok/, 'the first request was answered');
  t.same(
    carried.filter((lines) => lines.includes('GET /user')),
    [['GET /user']],
    'the request with the secret had a connection to itself',
  );
});
