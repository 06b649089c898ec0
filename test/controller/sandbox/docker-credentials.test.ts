/**
 * A sandbox using a token it never sees, on the real engine: the deployment config binds
 * GITHUB_TOKEN to a TLS test server (`Authorization: Bearer {}`), the controller's environment
 * holds the real value, and curl, git over https, Node fetch (transparent: no proxy settings) and
 * Python urllib in the sandbox each reach the server, which answers only the real token; the
 * sandbox reads only the placeholder, and the placeholder sent to another host is refused
 * `secret_wrong_host`.
 *
 * The server's certificate is signed by a CA of this test; the egress proxy verifies upstreams
 * against its system bundle, so the test runs a derived egress image whose bundle holds that CA
 * too (nothing else of the image changes).
 */
import t from 'tap';
import https from 'node:https';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { sandboxTestEnv, EGRESS_IMAGE, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';
import { createDockerSandbox } from '../../../controller/index.js';

await fileNeeds(t, 'engine');

const HOST = 'tls-upstream.capybara.test';
const OTHER = 'other-upstream.capybara.test';
const TOKEN = `ghp_${'T0k3nV4lu3'.repeat(3)}AbCdEf`;

/** A CA and a leaf for `names`, with openssl (the machine's; a test need of the engine tests). */
function testPki(dir: string, names: readonly string[]): { ca: string; key: string; cert: string } {
  const run = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=capybara test upstream CA');
  run('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', `/CN=${names[0]}`);
  writeFileSync(join(dir, 'ext'), `subjectAltName=${names.map((n) => `DNS:${n}`).join(',')}\nextendedKeyUsage=serverAuth\n`);
  run('x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'leaf.pem', '-days', '2', '-extfile', 'ext');
  const read = (f: string): string => execFileSync('cat', [join(dir, f)]).toString();
  return { ca: read('ca.pem'), key: read('leaf.key'), cert: read('leaf.pem') };
}

t.test('curl, git, Node fetch and Python urllib use a token the sandbox never sees', async (t) => {
  const imageTag = (runId: string): string => `capybara-egress-testca-${runId}:latest`;
  const s = await sandboxTestEnv(t, (runId) => [imageTag(runId)]);
  if (!s) return;
  const { env } = s;
  const dir = mkdtempSync(join(tmpdir(), 'cap-cred-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pki = testPki(dir, [HOST, OTHER]);

  // The egress image with the test CA in its system bundle, as an operator's own CA would be.
  writeFileSync(join(dir, 'Dockerfile'), `FROM ${EGRESS_IMAGE}\nUSER root\nCOPY ca.pem /tmp/test-ca.pem\nRUN cat /tmp/test-ca.pem >> /etc/ssl/certs/ca-certificates.crt && rm /tmp/test-ca.pem\nUSER egress\n`);
  const image = imageTag(env.runId);
  execFileSync('docker', ['build', '-q', '-t', image, dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.teardown(() => void execFileSync('docker', ['rmi', '-f', image], { stdio: 'ignore' }));

  // The server: on the host, at the shared network's gateway (where the test upstream is), 443.
  const seen: Array<{ path: string; authorization: string | undefined }> = [];
  const server = https.createServer({ key: pki.key, cert: pki.cert }, (req, res) => {
    seen.push({ path: req.url ?? '', authorization: req.headers.authorization });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) {
      res.writeHead(401).end('wrong token\n');
      return;
    }
    // git's dumb protocol: info/refs as text is all ls-remote reads.
    if ((req.url ?? '').startsWith('/repo.git/info/refs')) {
      res.writeHead(200, { 'content-type': 'text/plain' }).end(`${'a'.repeat(40)}\trefs/heads/main\n`);
      return;
    }
    res.writeHead(200).end('token ok\n');
  });
  await new Promise<void>((resolve) => server.listen(443, s.upstreamIp, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const stateDir = join(dir, 'state');
  const provider = createDockerSandbox(
    {
      endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressProxyImage: image, stateDir,
      secrets: [{ name: 'GITHUB_TOKEN', hosts: [HOST], header: 'Authorization', format: 'Bearer {}' }],
    },
    { labels: env.labels, egressTestHosts: { [HOST]: s.upstreamIp, [OTHER]: s.upstreamIp } },
    { logger: pino({ level: 'warn' }), env: { GITHUB_TOKEN: TOKEN } },
  );
  const h = await provider.create({ id: `${env.runId}-cred`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [HOST, OTHER] } });
  t.teardown(() => provider.destroy(h));
  const run = async (command: string): Promise<{ exitCode: number | null; stdout: string; stderr: string }> => provider.exec(h, command, { timeoutMs: 60_000 });

  const held = await run('printf %s "$GITHUB_TOKEN"; echo; env | grep -c -- "$(printf %s "$GITHUB_TOKEN" | cut -c1-4)" || :');
  const placeholder = held.stdout.split('\n')[0] ?? '';
  t.match(placeholder, /^ghp_[A-Za-z0-9]{36}$/, 'the sandbox holds a placeholder of the token\'s shape');
  t.not(placeholder, TOKEN);
  const everywhere = await run(`grep -rl -- '${TOKEN}' /proc/self/environ /etc /workspace /tmp 2>/dev/null | head -1`);
  t.equal(everywhere.stdout, '', 'the token is nowhere the sandbox can read');
  const bundle = await run('grep -c BEGIN /etc/capybara/ca-bundle.pem');
  t.ok(Number(bundle.stdout.trim()) > 1, 'the sandbox\'s bundle holds the system CAs and the deployment CA');

  const clients = [
    { name: 'curl', command: `curl -sS https://${HOST}/user` },
    { name: 'Python urllib', command: `python3 -c 'import urllib.request; print(urllib.request.urlopen("https://${HOST}/user").read().decode(), end="")'` },
    { name: 'Node fetch (no proxy settings: transparent)', command: `node -e 'fetch("https://${HOST}/user").then((r) => r.text()).then((b) => process.stdout.write(b))'` },
    { name: 'git over https', command: `git ls-remote https://${HOST}/repo.git | cut -f2` },
  ];
  for (const c of clients) {
    const r = await run(c.command);
    t.equal(r.exitCode, 0, `${c.name}: ${r.stderr}`);
    t.match(r.stdout, c.name === 'git over https' ? /^refs\/heads\/main$/m : /^token ok$/m, `${c.name}: the server got the real token`);
  }
  t.ok(seen.length >= clients.length && seen.every((x) => x.authorization === `Bearer ${TOKEN}`), 'every request the server saw carried the real token');

  const wrong = await run(`curl -sS -i -H "Authorization: Bearer $GITHUB_TOKEN" http://${OTHER}/user`);
  t.match(wrong.stdout, /^X-Egress-Reason: secret_wrong_host\r?$/m, 'the placeholder to another host is refused');
  t.notMatch(wrong.stdout, placeholder, 'and the refusal does not echo it');
});
