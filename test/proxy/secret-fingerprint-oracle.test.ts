/**
 * A secret's fingerprint (`sha256:` + 12 hex digits of the value's digest, unsalted) is an offline
 * check of a guessed value: whoever holds it can try a dictionary against it at GPU speed, with no
 * host in the loop. The operator's decision line names a secret by it; what the workload is sent
 * (the refusal's body and status line) names the secret by name only. Otherwise a workload holding
 * only a placeholder gets the fingerprint by sending that placeholder to another host, and recovers
 * a value that is a password (Basic credentials, git over https) rather than a random token.
 */
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import type { PolicyInput } from '../../policy/index.js';
import { applySecrets, screenHost, screenTarget } from '../../policy/index.js';
import { fingerprint, loadSecrets, PlaceholderInBody, SecretReflected } from '../../proxy/secrets/index.js';
import { listen } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { policyOf, startTestProxy } from '../support/test-proxy.js';

// A password, as a registry's Basic credentials hold one: a dictionary finds it from its digest.
const VALUE = 'Summer2024!registry';
const PLACEHOLDER = 'placeholder-REGISTRY-PASSWORD-000';
const PRINT = fingerprint(VALUE);
const HEX = PRINT.slice('sha256:'.length);

const web = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => res.writeHead(200, { 'Content-Length': '3' }).end('ok\n'));
});
const webPort = await listen(web);
t.teardown(() => web.close());

const input: PolicyInput = {
  allowHosts: [{ host: 'registry.test', inspect: true, secrets: [{ name: 'REGISTRY_PASSWORD' }] }, 'paste.test'],
  connectPorts: [webPort],
  testHosts: { 'registry.test': '127.0.0.1', 'paste.test': '127.0.0.1' },
};
const proxy = await startTestProxy({ policy: input });
t.teardown(() => proxy.close());
const loaded = loadSecrets(policyOf(input), { REGISTRY_PASSWORD: VALUE, EGRESS_PLACEHOLDER_REGISTRY_PASSWORD: PLACEHOLDER }, () => '');
proxy.proxy.setPolicy(loaded);
const paste = `paste.test:${webPort}`;
const secret = loaded.secrets!.byName.get('REGISTRY_PASSWORD')!;

t.test('a refusal the workload is sent names the secret, never its fingerprint; the line keeps it', async (t) => {
  const requests = [
    `GET http://${paste}/ HTTP/1.1\r\nHost: ${paste}\r\nX-Note: ${PLACEHOLDER}\r\n\r\n`,
    `GET http://${paste}/?p=${PLACEHOLDER} HTTP/1.1\r\nHost: ${paste}\r\n\r\n`,
  ];
  for (const request of requests) {
    const before = proxy.logs.length;
    const res = await rawRequest(proxy.port, request);
    res.socket.destroy();
    t.equal(res.status, 403);
    t.equal(res.reason, 'secret_wrong_host');
    t.match(res.body, /REGISTRY_PASSWORD/, 'the body names the secret');
    t.notOk(res.head.includes(HEX) || res.body.includes(HEX), 'neither the status line nor the body holds the fingerprint');
    t.match(proxy.logs.slice(before).find((l) => l.event === 'decision'), { reason: 'secret_wrong_host', secrets: [`REGISTRY_PASSWORD ${PRINT}`] }, 'the line names it by fingerprint');
  }
});

t.test('a placeholder in a body: the refusal the workload reads has no fingerprint either', async (t) => {
  const body = `text=${PLACEHOLDER}`;
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.on('error', () => undefined);
  const reply = readUntil(socket, undefined);
  socket.write(`POST http://${paste}/ HTTP/1.1\r\nHost: ${paste}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  const out = await reply;
  t.match(out, /^HTTP\/1\.1 403 /);
  t.match(out, /REGISTRY_PASSWORD/);
  t.notOk(out.includes(HEX), 'no fingerprint in what the workload reads');
});

t.test('every detail a refusal carries names the secret without its fingerprint; the line field keeps it', async (t) => {
  const set = loaded.secrets!;
  const details: { detail: string; secrets: readonly string[] }[] = [];
  const push = (r: { detail: string; secrets: readonly string[] } | undefined): void => void (r !== undefined && details.push(r));
  push(screenTarget(set, `/x/${PLACEHOLDER}`, []));
  push(screenTarget(set, '/', ['Host', `${PLACEHOLDER}.paste.test`]));
  push(screenHost(set, `${PLACEHOLDER}.paste.test`));
  const applied = applySecrets(set, { host: 'paste.test' }, { target: '/', headers: ['X-Note', PLACEHOLDER], inspected: true });
  if (!applied.ok) push(applied);
  const body = new PlaceholderInBody(secret);
  const reflected = new SecretReflected(secret, 'head');
  t.equal(details.length, 4);
  for (const d of details) {
    t.match(d.detail, /REGISTRY_PASSWORD/);
    t.notOk(d.detail.includes(HEX), d.detail);
    t.same(d.secrets, [`REGISTRY_PASSWORD ${PRINT}`]);
  }
  for (const err of [body, reflected]) {
    t.match(err.message, /REGISTRY_PASSWORD/);
    t.notOk(err.message.includes(HEX), err.message);
    t.same(err.secrets, [`REGISTRY_PASSWORD ${PRINT}`]);
  }
});
