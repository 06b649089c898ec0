/**
 * `--refusal-hint` (EGRESS_REFUSAL_HINT): what a refusal of a host off the allowlist advises
 * instead of "add the host name to allowHosts", for a proxy whose allowlist its clients' operator
 * changes some other way (the controller's sandboxes). Validated as one line of printable ASCII
 * within a length (it goes into the response body); only the body carries it, never the status
 * line or a header; other reasons keep their own advice; a reload keeps it. On a shared proxy,
 * `{sandbox}` in it names the sandbox refused, by its own registration.
 */
import t from 'tap';
import { REASONS } from '../../policy/index.js';
import { loadPolicy, parseConfig } from '../../proxy/config.js';
import { listen } from '../support/loopback.js';
import { rawRequest } from '../support/raw-client.js';
import { startTestProxy } from '../support/test-proxy.js';
import net from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../proxy/index.js';
import { captureLogs } from '../support/log-capture.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { egressShardBody } from '../../controller/docker/shard-spec.js';
import { EGRESS_ENV } from '../../common/index.js';
import { egressRefusalHint } from '../../controller/docker/container-spec.js';

const HINT = 'the allowlist of sandbox cap-demo is set when it is created: see "capybara-sandbox logs cap-demo"';

t.test('the option and its variable: validated, and kept by the policy on every load', async (t) => {
  const fromFlag = parseConfig(['--allow-hosts', 'a.test', '--refusal-hint', HINT], {});
  t.equal(fromFlag?.refusalHint, HINT);
  const fromEnv = parseConfig([], { EGRESS_ALLOW_HOSTS: 'a.test', EGRESS_REFUSAL_HINT: HINT });
  if (fromEnv === undefined) return t.fail('no config');
  t.equal(loadPolicy(fromEnv, () => '').refusalHint, HINT, 'start-up and reload build the policy with it');
  const fromFile = parseConfig(['--policy', 'p.yaml'], { EGRESS_REFUSAL_HINT: HINT });
  if (fromFile === undefined) return t.fail('no config');
  t.equal(loadPolicy(fromFile, () => 'allowHosts: [a.test]\n').refusalHint, HINT, 'with a policy file too');
  t.equal(parseConfig(['--allow-hosts', 'a.test'], {})?.refusalHint, undefined, 'none unless given');
  const bad = [
    { name: 'a line break', value: 'see logs\r\nX-Evil: 1', message: /^EGRESS_REFUSAL_HINT: expected one line of printable ASCII/ },
    { name: 'a control character', value: 'see \x1b[31mlogs', message: /^EGRESS_REFUSAL_HINT: expected one line of printable ASCII/ },
    { name: 'non-ASCII', value: 'see “logs”', message: /^EGRESS_REFUSAL_HINT: expected one line of printable ASCII/ },
    { name: 'leading spaces', value: '  see logs', message: /without leading or trailing spaces/ },
    { name: 'too long', value: 'x'.repeat(301), message: /^EGRESS_REFUSAL_HINT: expected at most 300 characters/ },
  ];
  for (const row of bad) {
    t.throws(() => parseConfig([], { EGRESS_ALLOW_HOSTS: 'a.test', EGRESS_REFUSAL_HINT: row.value }), { code: 'invalid_config', message: row.message }, row.name);
  }
  t.throws(() => parseConfig(['--allow-hosts', 'a.test', '--refusal-hint', 'a\tb'], {}), { message: /^--refusal-hint: / }, 'the flag is named when it was the flag');
  t.equal(parseConfig(['--allow-hosts', 'a.test', '--refusal-hint', 'x'.repeat(300)], {})?.refusalHint?.length, 300, '300 characters are fine');
  // The hint the controller gives each sandbox's proxy passes the proxy's check, for the longest name.
  const longest = `cap-${'n'.repeat(52)}`;
  for (const live of [true, false]) {
    t.equal(parseConfig([], { EGRESS_ALLOW_HOSTS: '', EGRESS_REFUSAL_HINT: egressRefusalHint(longest, live) })?.refusalHint, egressRefusalHint(longest, live));
  }
  t.match(egressRefusalHint('cap-demo', false), /"capybara-sandbox logs cap-demo".*--allow HOST/);
  t.match(egressRefusalHint('cap-demo', true), /^the allowlist is the operator's: "capybara-sandbox allow cap-demo HOST" allows a host, "capybara-sandbox logs cap-demo" shows the decisions$/);
});

t.test('a refusal of a host off the allowlist carries the hint in its body only', async (t) => {
  const server = net.createServer((s) => s.destroy());
  const port = await listen(server);
  t.teardown(() => server.close());
  const hinted = await startTestProxy({ policy: { allowHosts: ['a.test'], connectPorts: [port], testHosts: { 'a.test': '127.0.0.1' }, refusalHint: HINT } });
  const plain = await startTestProxy({ policy: { allowHosts: ['a.test'], connectPorts: [port], testHosts: { 'a.test': '127.0.0.1' } } });
  t.teardown(async () => {
    await hinted.close();
    await plain.close();
  });
  const requests = [
    { name: 'CONNECT', text: 'CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n' },
    { name: 'plain HTTP', text: `GET http://other.test:${port}/ HTTP/1.1\r\nHost: other.test:${port}\r\n\r\n` },
  ];
  for (const request of requests) {
    const r = await rawRequest(hinted.port, request.text);
    r.socket.destroy();
    t.equal(r.reason, 'host_not_allowed', request.name);
    t.match(r.body, new RegExp(`^egress denied other\\.test:\\d+: host_not_allowed: other\\.test is not on the allowlist; ${HINT.replace(/[.*+?^${}()|[\]\\"]/g, '\\$&')}\\n$`), `${request.name}: the body ends with the hint`);
    t.notMatch(r.head, /capybara-sandbox/, `${request.name}: neither the status line nor a header carries it`);
    t.notMatch(r.body, /allowHosts/, `${request.name}: not the standalone advice`);
    const standalone = await rawRequest(plain.port, request.text);
    standalone.socket.destroy();
    t.ok(standalone.body.endsWith(`; ${REASONS.host_not_allowed.advice}\n`), `${request.name}: without a hint, the catalog's advice`);
  }
  const offPort = await rawRequest(hinted.port, 'CONNECT a.test:81 HTTP/1.1\r\nHost: a.test:81\r\n\r\n');
  offPort.socket.destroy();
  t.equal(offPort.reason, 'port_not_allowed');
  t.ok(offPort.body.endsWith(`; ${REASONS.port_not_allowed.advice}\n`), 'another reason keeps its own advice');
});

t.test('on a shared proxy, {sandbox} in the hint is the name of the sandbox refused', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hint-'));
  const hint = 'ask "capybara-sandbox allow {sandbox} HOST"; "capybara-sandbox logs {sandbox}" shows why';
  const { sink } = captureLogs();
  const { port } = await startSharedProxy(t, dir, createLogger('debug', sink), { refusalHint: hint });
  const sandboxes = [
    { sandbox: 'cap-a', subnet: '127.0.1.0/28', proxy: '127.0.1.1', client: '127.0.1.5' },
    { sandbox: 'cap-b.x_1', subnet: '127.0.2.0/28', proxy: '127.0.2.1', client: '127.0.2.5' },
  ];
  for (const [i, s] of sandboxes.entries()) {
    putSlot(dir, `slot-${i}`, { version: 1, sandbox: s.sandbox, lifecycle: `life-${i}-0001`, subnet: s.subnet, address: s.proxy, policy: { allowHosts: ['a.test'] } });
  }
  for (const s of sandboxes) {
    let r = await rawRequest(port, 'CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n', s.proxy, 5_000, s.client);
    // The registration is read as the directory changes: a refusal before it is unknown_client.
    for (let tries = 0; r.reason === 'unknown_client' && tries < 50; tries++) {
      r.socket.destroy();
      await new Promise((resolve) => setTimeout(resolve, 100));
      r = await rawRequest(port, 'CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n', s.proxy, 5_000, s.client);
    }
    r.socket.destroy();
    t.equal(r.reason, 'host_not_allowed', s.sandbox);
    t.ok(r.body.endsWith(`; ask "capybara-sandbox allow ${s.sandbox} HOST"; "capybara-sandbox logs ${s.sandbox}" shows why\n`), `${s.sandbox}: its own name, each time: ${r.body}`);
  }
  // The hint the controller gives its shards is a template of this kind, and passes the proxy's check.
  const env = egressShardBody({ name: 'cap-egress.0.n', index: 0, image: 'egress', logCaps: { logMaxSizeMb: 10, logMaxFiles: 3 }, nanoCpus: 1e9, labels: {} }, 'n', undefined).Env ?? [];
  const shardHint = env.find((e) => e.startsWith(`${EGRESS_ENV.refusalHint}=`))?.slice(EGRESS_ENV.refusalHint.length + 1) ?? '';
  t.equal(parseConfig([], { EGRESS_TENANTS_DIR: '/t', EGRESS_REFUSAL_HINT: shardHint })?.refusalHint, shardHint);
  t.match(shardHint, /^the allowlist is the operator's: "capybara-sandbox allow \{sandbox\} HOST" allows a host, "capybara-sandbox logs \{sandbox\}" shows the decisions$/);
});
