/**
 * A sandbox with an inspected entry on the real engine, through the real socket proxy: its egress
 * proxy starts with the per-sandbox EGRESS_POLICY_JSON and the deployment CA (EGRESS_CA_INLINE)
 * and still serves the rest of the allowlist; the sandbox trusts the CA through files its root
 * idle process wrote (the system bundle plus the CA, root's, unwritable by the sandbox user, back
 * after a restart) and the trust variables; neither its create body nor anything it can read
 * holds the CA key. (The secrets' round trip through real clients is docker-credentials.test.ts.)
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';
import { createDockerSandbox } from '../../../controller/index.js';
import { decodeInline } from '../../../common/index.js';

await fileNeeds(t, 'engine');

t.test('a sandbox trusts the deployment CA; its proxy holds the key, the sandbox never', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env } = s;
  const dir = mkdtempSync(join(tmpdir(), 'cap-catrust-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const stateDir = join(dir, 'state');
  const provider = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, stateDir, inspectHosts: ['*.inspected.capybara.test'] },
    { labels: env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'warn' }) },
  );
  const h = await provider.create({ id: `${env.runId}-catrust`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST, '*.inspected.capybara.test'] } });
  t.teardown(() => provider.destroy(h));
  const run = (command: string) => provider.exec(h, command, { timeoutMs: 60_000 });

  const stored = readFileSync(join(stateDir, 'deployment-ca.pem'), 'utf8');
  const egress = await s.inspect(`${h.id}-egress`);
  const egressEnv = Object.fromEntries((egress.Config.Env ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
  t.same(JSON.parse(egressEnv.EGRESS_POLICY_JSON ?? ''), { version: 1, allowHosts: [UPSTREAM_HOST, { host: '*.inspected.capybara.test', inspect: true }] });
  t.notOk('EGRESS_ALLOW_HOSTS' in egressEnv);
  const ca = await decodeInline(egressEnv.EGRESS_CA_INLINE ?? '');
  t.equal(ca.certificatePem + ca.keyPem, stored, 'the proxy got the deployment CA');

  const fetched = await run(`curl -sS http://${UPSTREAM_HOST}/`);
  t.same([fetched.exitCode, fetched.stdout], [0, UPSTREAM_BODY], `the proxy took its policy and serves the allowlist: ${fetched.stderr}`);

  const files = await run([
    'stat -c "%U %a %n" /etc/capybara /etc/capybara/ca.pem /etc/capybara/ca-bundle.pem',
    'grep -c "BEGIN CERTIFICATE" /etc/capybara/ca-bundle.pem',
    'grep -c "BEGIN CERTIFICATE" /etc/ssl/certs/ca-certificates.crt',
    'cat /etc/capybara/ca.pem',
    '(echo x > /etc/capybara/ca.pem) 2>/dev/null && echo WRITABLE || echo read-only',
    'echo "$SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $GIT_SSL_CAINFO $PIP_CERT $NODE_EXTRA_CA_CERTS"',
    'python3 -c "import ssl; print(ssl.create_default_context().cert_store_stats()[\'x509_ca\'])"',
  ].join('; '));
  const lines = files.stdout.split('\n');
  t.same(lines.slice(0, 3), ['root 755 /etc/capybara', 'root 644 /etc/capybara/ca.pem', 'root 644 /etc/capybara/ca-bundle.pem'], 'root\'s files, readable by all');
  t.equal(Number(lines[3]), Number(lines[4]) + 1, 'the bundle: the system\'s certificates and the CA');
  t.match(files.stdout, ca.certificatePem.trim(), 'ca.pem is the deployment CA');
  t.match(files.stdout, /^read-only$/m, 'the sandbox user cannot change it');
  t.match(files.stdout, /^\/etc\/capybara\/ca-bundle\.pem \/etc\/capybara\/ca-bundle\.pem \/etc\/capybara\/ca-bundle\.pem \/etc\/capybara\/ca-bundle\.pem \/etc\/capybara\/ca-bundle\.pem \/etc\/capybara\/ca\.pem$/m);
  t.equal(lines.at(-2), String(Number(lines[4]) + 1), 'Python\'s default context loads them all');

  const keyBody = ca.keyPem.split('\n').slice(1, -2).join('');
  const sandbox = await s.inspect(h.id);
  t.notMatch(JSON.stringify(sandbox), keyBody.slice(0, 40), 'the CA key is not in the sandbox container');
  const readable = await run(`grep -rl -- '${keyBody.slice(0, 40)}' /etc /workspace /tmp /home 2>/dev/null | head -1; env | grep -c PRIVATE || :`);
  t.equal(readable.stdout, '0\n', 'nothing the sandbox user reads holds it');

  await provider.suspend(h);
  const again = await run('grep -c "BEGIN CERTIFICATE" /etc/capybara/ca-bundle.pem');
  t.equal(again.stdout.trim(), lines[3], 'written again at the next start (a tmpfs starts empty)');
});
