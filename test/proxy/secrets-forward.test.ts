/**
 * Placeholders on plain HTTP, end to end on loopback (proxy/http/forward.ts, exchange.ts): plain
 * HTTP never carries a secret, so a placeholder in a header (to any host, the bound one too), in
 * the URL (raw or percent-encoded), or in a body (split across chunks and across TCP writes) is
 * refused 403 secret_wrong_host; the upstream never gets a complete request that carried one; the
 * decision line names the secret by fingerprint, and no log line holds the value or placeholder.
 * A request without placeholders is unaffected, its body byte for byte.
 */
import http from 'node:http';
import net from 'node:net';
import t, { type Test } from 'tap';
import { listen } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { policyOf, startTestProxy } from '../support/test-proxy.js';
import type { PolicyInput } from '../../policy/index.js';
import { fingerprint, loadSecrets } from '../../proxy/secrets/index.js';

const VALUE = 'ghp_REALrealREALrealREALrealREALreal1234';
const PLACEHOLDER = 'ghp_PLACEHOLDERplaceholderPLACEHOLDER00';
const PRINT = `GITHUB_TOKEN ${fingerprint(VALUE)}`;

// The upstream: every request it began, whether its body arrived whole, and what it held.
interface Seen {
  url: string;
  headers: string[];
  body: string;
  complete: boolean;
}
const seen: Seen[] = [];
const web = http.createServer((req, res) => {
  const entry: Seen = { url: req.url ?? '', headers: req.rawHeaders, body: '', complete: false };
  seen.push(entry);
  req.on('data', (d: Buffer) => (entry.body += d.toString('latin1')));
  req.on('end', () => {
    entry.complete = true;
    res.writeHead(200, { 'Content-Length': '3' }).end('ok\n');
  });
  req.on('error', () => undefined);
});
const webPort = await listen(web);
t.teardown(() => web.close());

const input: PolicyInput = {
  allowHosts: [{ host: 'bound.test', inspect: true, secrets: [{ name: 'GITHUB_TOKEN', header: 'Authorization', format: 'Bearer {}' }] }, 'other.test', '*.wild.test'],
  connectPorts: [webPort],
  testHosts: { 'bound.test': '127.0.0.1', 'other.test': '127.0.0.1' },
};
const proxyT = await startTestProxy({ policy: input });
t.teardown(() => proxyT.close());
proxyT.proxy.setPolicy(loadSecrets(policyOf(input), { GITHUB_TOKEN: VALUE, EGRESS_PLACEHOLDER_GITHUB_TOKEN: PLACEHOLDER }, () => ''));
const { port } = proxyT;
const other = `other.test:${webPort}`;
const bound = `bound.test:${webPort}`;
const decisions = (): Record<string, unknown>[] => proxyT.logs.filter((l) => l.event === 'decision');

function noLeak(t: Test): void {
  const text = JSON.stringify(proxyT.logs);
  t.notOk(text.includes(PLACEHOLDER), 'no log line holds the placeholder');
  t.notOk(text.includes(VALUE), 'no log line holds the value');
}

const chunk = (text: string): string => `${text.length.toString(16)}\r\n${text}\r\n`;

const REFUSED: { name: string; request: string }[] = [
  { name: 'in a header to another host', request: `GET http://${other}/ HTTP/1.1\r\nHost: ${other}\r\nAuthorization: Bearer ${PLACEHOLDER}\r\n\r\n` },
  { name: 'in a header to the bound host, over plain HTTP', request: `GET http://${bound}/ HTTP/1.1\r\nHost: ${bound}\r\nX-Token: ${PLACEHOLDER}\r\n\r\n` },
  { name: 'in Basic credentials', request: `GET http://${other}/ HTTP/1.1\r\nHost: ${other}\r\nAuthorization: Basic ${Buffer.from(`git:${PLACEHOLDER}`).toString('base64')}\r\n\r\n` },
  { name: 'in the URL', request: `GET http://${other}/gist?content=${PLACEHOLDER} HTTP/1.1\r\nHost: ${other}\r\n\r\n` },
  { name: 'in the URL, percent-encoded', request: `GET http://${other}/x/${PLACEHOLDER.replace(/[A-Z]/g, (c) => `%${c.charCodeAt(0).toString(16)}`)} HTTP/1.1\r\nHost: ${other}\r\n\r\n` },
  { name: 'in the URL of an unlisted host', request: `GET http://nowhere.test:${webPort}/${PLACEHOLDER} HTTP/1.1\r\nHost: nowhere.test:${webPort}\r\n\r\n` },
];

for (const c of REFUSED) {
  t.test(`refused before the upstream: placeholder ${c.name}`, async (t) => {
    seen.length = 0;
    const before = decisions().length;
    const res = await rawRequest(port, c.request);
    t.equal(res.status, 403);
    t.equal(res.reason, 'secret_wrong_host');
    t.notOk(res.head.includes(PLACEHOLDER) || res.body.includes(PLACEHOLDER), 'the refusal does not echo the placeholder');
    t.match(res.body, /GITHUB_TOKEN/);
    t.notOk(res.body.includes(fingerprint(VALUE)), 'the body names the secret, not its fingerprint (secret-fingerprint-oracle.test.ts)');
    await new Promise((r) => setTimeout(r, 50));
    t.equal(seen.length, 0, 'the upstream saw nothing');
    const lines = decisions().slice(before);
    t.equal(lines.length, 1);
    t.match(lines[0], { decision: 'deny', reason: 'secret_wrong_host', secrets: [PRINT] });
    noLeak(t);
  });
}

async function bodyRefused(t: Test, host: string, parts: readonly string[]): Promise<void> {
  seen.length = 0;
  const before = decisions().length;
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  const reply = readUntil(socket, undefined);
  for (const part of parts) {
    socket.write(part);
    await new Promise((r) => setTimeout(r, 30));
  }
  const out = await reply;
  t.match(out, /^HTTP\/1\.1 403 /);
  t.match(out, /X-Egress-Reason: secret_wrong_host/);
  t.notOk(out.includes(PLACEHOLDER));
  await new Promise((r) => setTimeout(r, 100));
  t.notOk(seen.some((s) => s.complete), 'the upstream never got a complete request');
  t.notOk(seen.some((s) => s.body.includes(PLACEHOLDER)), 'nor the placeholder whole');
  const lines = decisions().slice(before);
  t.equal(lines.length, 1);
  t.match(lines[0], { decision: 'deny', reason: 'secret_wrong_host', secrets: [PRINT], host });
  noLeak(t);
}

t.test('a placeholder in a chunked body, split across chunks and TCP writes: cut upstream, refused', async (t) => {
  const head = `POST http://${other}/gists HTTP/1.1\r\nHost: ${other}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;
  const cut = 11;
  await bodyRefused(t, 'other.test', [head + chunk('{"files":"aaaa'), chunk(PLACEHOLDER.slice(0, cut)), chunk(PLACEHOLDER.slice(cut)), `${chunk('"}')}0\r\n\r\n`]);
});

t.test('a placeholder in a Content-Length body, to the bound host too', async (t) => {
  const body = `token=${PLACEHOLDER}&x=1`;
  const head = `PUT http://${bound}/upload HTTP/1.1\r\nHost: ${bound}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  await bodyRefused(t, 'bound.test', [head + body.slice(0, 20), body.slice(20)]);
});

t.test('a placeholder in a CONNECT host, in any case, is refused and not written down', async (t) => {
  const before = decisions().length;
  const res = await rawRequest(port, `CONNECT ${PLACEHOLDER.toLowerCase()}.wild.test:${webPort} HTTP/1.1\r\n\r\n`);
  res.socket.destroy();
  t.equal(res.status, 403);
  t.equal(res.reason, 'secret_wrong_host');
  t.notOk(res.head.toLowerCase().includes(PLACEHOLDER.toLowerCase()) || res.body.toLowerCase().includes(PLACEHOLDER.toLowerCase()));
  await settle(() => decisions().length > before, 'the decision line');
  t.match(decisions().at(-1), { decision: 'deny', reason: 'secret_wrong_host' });
  t.notOk(JSON.stringify(proxyT.logs).toLowerCase().includes(PLACEHOLDER.toLowerCase()), 'in no case');
});

t.test('a request without placeholders passes unchanged, and gets no secret over plain HTTP', async (t) => {
  seen.length = 0;
  const body = 'x'.repeat(70_000);
  const out = await rawRequest(port, `POST http://${bound}/ok HTTP/1.1\r\nHost: ${bound}\r\nAuthorization: Bearer mine\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  t.equal(out.status, 200);
  await settle(() => seen.some((s) => s.complete), 'the upstream request');
  t.equal(seen[0]?.body, body, 'the body byte for byte');
  t.same(seen[0]?.headers.filter((_h, i, a) => i % 2 === 1 && a[i - 1]?.toLowerCase() === 'authorization'), ['Bearer mine'], 'plain HTTP: the sandbox\'s header, never the secret');
  t.notOk(JSON.stringify(seen).includes(VALUE));
  t.match(decisions().at(-1), { decision: 'allow', completed: true });
  t.equal(decisions().at(-1)?.secrets, undefined, 'nothing put in, nothing named');
  noLeak(t);
});
