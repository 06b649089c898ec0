/**
 * A secret whose value is Basic credentials already encoded: an operator binds
 * `{ header: Authorization, format: "Basic {}" }` with the value `base64(user:token)` (an API that
 * takes its key as the Basic user, as Stripe's does, or an email and an API token, as Atlassian's
 * does), or the sandbox puts the placeholder of such a value after `Basic `. The host decodes the
 * credentials, and one that quotes what it read (the user it found or could not find, a debug
 * page of the credentials) hands the token back in clear, which the value watch, looking for the
 * base64 text it sent, never saw (review finding). The token is watched for decoded too; a user
 * name alone, which hosts quote for good reasons, is not refused.
 */
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

const b64 = (text: string): string => Buffer.from(text).toString('base64');
/** The key as the Basic user, no password. */
const KEY_AS_USER = 'sk_live_REALrealREALrealREALrealREAL1234';
/** A user name (no secret) and an API token as the password. */
const USER = 'alice.smith@example.com';
const TOKEN = 'ATATTrealREALrealREALrealREALrealREAL99';
const SWAPPED = 'rk_live_SWAPswapSWAPswapSWAPswapSWAP5678';
const PLACEHOLDER = 'c2tfcGxhY2Vob2xkZXJQTEFDRUhPTERFUnBsYWNl';

const cert = selfSignedCert(['key.test', 'token.test', 'swap.test']);
const upstream = https.createServer(cert, (req, res) => {
  req.resume();
  req.on('end', () => {
    const encoded = /^Basic (.*)$/.exec(String(req.headers.authorization ?? ''))?.[1] ?? '';
    const decoded = Buffer.from(encoded, 'base64').toString('latin1');
    const user = decoded.slice(0, decoded.indexOf(':'));
    // `/whoami` answers as httpbin's /basic-auth does: the user it read from the credentials.
    // `/debug` quotes the credentials as it decoded them, as a diagnostic page might.
    const text = req.url === '/debug' ? JSON.stringify({ credentials: decoded }) : JSON.stringify({ authenticated: true, user });
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': String(text.length) }).end(text);
  });
});
const port = await listenUntilEnd(t, upstream);

const leaves = await testLeafIssuer();
const input: PolicyInput = {
  allowHosts: [
    { host: 'key.test', inspect: true, secrets: [{ name: 'KEY', header: 'Authorization', format: 'Basic {}' }] },
    { host: 'token.test', inspect: true, secrets: [{ name: 'TOKEN', header: 'Authorization', format: 'Basic {}' }] },
    { host: 'swap.test', inspect: true, secrets: [{ name: 'SWAP' }] },
  ],
  connectPorts: [port],
  testHosts: { 'key.test': '127.0.0.1', 'token.test': '127.0.0.1', 'swap.test': '127.0.0.1' },
};
const proxy = await startTestProxy({ policy: input, inspection: { leaves, upstreamCa: [cert.cert] } });
t.teardown(() => proxy.close());
const env = { KEY: b64(`${KEY_AS_USER}:`), TOKEN: b64(`${USER}:${TOKEN}`), SWAP: b64(`${SWAPPED}:`), EGRESS_PLACEHOLDER_SWAP: PLACEHOLDER };
proxy.proxy.setPolicy(loadSecrets(policyOf(input), env, () => ''));

/** One request on a new inspected connection to `host`; the response's text. */
async function send(host: string, path: string, extra = ''): Promise<string> {
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.write(`CONNECT ${host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  await readUntil(socket, '\r\n\r\n', 3_000);
  const secure = tls.connect({ socket, servername: host, ca: leaves.caCertificatePem });
  await new Promise((r) => secure.once('secureConnect', r));
  secure.write(`GET ${path} HTTP/1.1\r\nHost: ${host}:${port}\r\n${extra}Connection: close\r\n\r\n`);
  const text = await readUntil(secure, undefined, 5_000);
  secure.destroy();
  return text;
}

t.test('a host that quotes the Basic user it decoded never hands back a key bound as that user', async (t) => {
  const answer = await send('key.test', '/whoami');
  t.notOk(answer.includes(KEY_AS_USER.slice(0, 12)), 'the key, decoded, does not reach the workload');
  t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
});

t.test('a host that quotes the credentials it decoded never hands back the token in them', async (t) => {
  const answer = await send('token.test', '/debug');
  t.notOk(answer.includes(TOKEN.slice(0, 12)), 'the token, decoded, does not reach the workload');
  t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
  const user = await send('token.test', '/whoami');
  t.match(user, /^HTTP\/1\.1 200 .*"user":"alice\.smith@example\.com"/s, 'the user name alone, which is no secret, passes');
});

t.test('a placeholder the sandbox puts after Basic is swapped for encoded credentials, and their decoded key is watched for too', async (t) => {
  const answer = await send('swap.test', '/whoami', `Authorization: Basic ${PLACEHOLDER}\r\n`);
  t.notOk(answer.includes(SWAPPED.slice(0, 12)), 'the key, decoded, does not reach the workload');
  t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: bad_upstream_response/s, 'refused as a bad upstream response');
});

t.test('no log line holds a value, decoded or not', async (t) => {
  const logs = JSON.stringify(proxy.logs);
  for (const text of [KEY_AS_USER, TOKEN, SWAPPED, ...Object.values(env)]) t.notOk(logs.includes(text), 'not logged');
});
