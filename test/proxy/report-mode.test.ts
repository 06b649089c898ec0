/**
 * Report mode through the real proxy on loopback: a host off the allowlist (or a port off
 * connectPorts) is reached, over plain HTTP and through CONNECT (a TLS tunnel still checks the
 * hello's server name), and its decision line carries would_deny; an IP literal, a name that
 * resolves to a private address and a tunnel whose hello names another host are still refused;
 * the metrics count the would-deny decisions apart and say the proxy is in report mode.
 */
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { EGRESS_METRICS } from '../../common/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { listen } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { startTestProxy } from '../support/test-proxy.js';
import { opensslUnavailable, selfSignedCert } from '../support/tls-cert.js';

const web = http.createServer((req, res) => res.writeHead(200, { 'Content-Type': 'text/plain' }).end(`hello ${req.headers.host ?? ''}\n`));
const webPort = await listen(web);
const dns = await startDnsServer();
dns.set('private.test', { answers: ['127.0.0.1'] });
dns.set('metadata.test', { answers: ['169.254.169.254'] });
t.teardown(async () => {
  web.close();
  await dns.close();
});

// Only listed.test is on the allowlist, and webPort is no connect port: everything the tests
// reach is reached because of report mode. Loopback upstreams need test pins (tests only).
const testHosts = { 'listed.test': '127.0.0.1', 'unlisted.test': '127.0.0.1', 'tls.test': '127.0.0.1' };
const report = await startTestProxy({ policy: { allowHosts: ['listed.test'], connectPorts: [443], testHosts, mode: 'report' }, dnsServer: dns.address, dnsTimeoutMs: 500 });
const enforce = await startTestProxy({ policy: { allowHosts: ['listed.test'], connectPorts: [443], testHosts }, dnsServer: dns.address, dnsTimeoutMs: 500 });
t.teardown(async () => {
  await report.close();
  await enforce.close();
});

const decisions = (logs: Record<string, unknown>[], host: string): Record<string, unknown>[] => logs.filter((l) => l.event === 'decision' && l.host === host);

async function metricValue(name: string, labels: string): Promise<number | undefined> {
  const text = await report.proxy.metrics.metrics();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
}

t.test('plain HTTP to a host off the allowlist: forwarded, its line marked would_deny host_not_allowed', async (t) => {
  const get = `GET http://unlisted.test:${webPort}/x HTTP/1.1\r\nHost: unlisted.test:${webPort}\r\nConnection: close\r\n\r\n`;
  const refused = await rawRequest(enforce.port, get);
  t.equal(refused.reason, 'host_not_allowed', 'enforce mode refuses it');
  const res = await rawRequest(report.port, get);
  t.equal(res.status, 200);
  t.match(res.body, `hello unlisted.test:${webPort}`);
  const [line] = decisions(report.logs, 'unlisted.test');
  t.match(line, { decision: 'allow', would_deny: 'host_not_allowed', port: webPort, addresses: ['127.0.0.1'], status: 200 });
  t.notOk('rule' in (line ?? {}), 'no allowlist entry matched, so the line names none');
});

t.test('a listed host on a port off connectPorts: forwarded, marked would_deny port_not_allowed', async (t) => {
  const res = await rawRequest(report.port, `GET http://listed.test:${webPort}/ HTTP/1.1\r\nHost: listed.test:${webPort}\r\nConnection: close\r\n\r\n`);
  t.equal(res.status, 200);
  t.match(decisions(report.logs, 'listed.test').at(-1), { decision: 'allow', would_deny: 'port_not_allowed', rule: 'listed.test' });
});

t.test('a listed host on a listed port: no would_deny', async (t) => {
  // Nothing listens on 443 here: the decision allows, the dial fails (connect_failed), unmarked.
  const res = await rawRequest(report.port, 'CONNECT listed.test:443 HTTP/1.1\r\nHost: listed.test:443\r\n\r\n');
  res.socket.destroy();
  const line = decisions(report.logs, 'listed.test').find((l) => l.port === 443);
  t.ok(line !== undefined && !('would_deny' in line), 'an allowed request is not marked');
});

t.test('refused in report mode as in enforce mode: IP literals and non-public addresses', async (t) => {
  const rows = [
    { name: 'an IPv4 literal (plain HTTP)', text: `GET http://127.0.0.1:${webPort}/ HTTP/1.1\r\nHost: 127.0.0.1:${webPort}\r\n\r\n`, reason: 'ip_literal' },
    { name: 'an IPv4 literal (CONNECT)', text: 'CONNECT 93.184.216.34:443 HTTP/1.1\r\nHost: 93.184.216.34:443\r\n\r\n', reason: 'ip_literal' },
    { name: 'an IPv6 literal (CONNECT)', text: 'CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n', reason: 'ip_literal' },
    { name: 'a decimal IPv4 literal', text: `GET http://2130706433:${webPort}/ HTTP/1.1\r\nHost: 2130706433:${webPort}\r\n\r\n`, reason: 'ip_literal' },
    { name: 'a name resolving to loopback (plain HTTP)', text: `GET http://private.test:${webPort}/ HTTP/1.1\r\nHost: private.test:${webPort}\r\n\r\n`, reason: 'address_not_allowed' },
    { name: 'a name resolving to metadata (CONNECT)', text: 'CONNECT metadata.test:80 HTTP/1.1\r\nHost: metadata.test:80\r\n\r\n', reason: 'address_not_allowed' },
    { name: 'a malformed host', text: 'CONNECT bad..test:443 HTTP/1.1\r\nHost: bad..test:443\r\n\r\n', reason: 'malformed_host' },
  ];
  for (const row of rows) {
    const res = await rawRequest(report.port, row.text);
    res.socket.destroy();
    t.equal(res.status, 403 - (row.reason === 'malformed_host' ? 3 : 0), `${row.name}: status`);
    t.equal(res.reason, row.reason, row.name);
  }
  const privateLine = decisions(report.logs, 'private.test')[0];
  t.match(privateLine, { decision: 'deny', reason: 'address_not_allowed', would_deny: undefined }, 'a refusal in every mode is no would_deny');
  t.notOk(report.dialed.some((d) => d.startsWith('169.254.')), 'the metadata address was never dialled');
});

const noOpenssl = opensslUnavailable();
t.test('CONNECT to a host off the allowlist: a TLS tunnel, its hello still checked', { skip: noOpenssl }, async (t) => {
  const cert = selfSignedCert(['tls.test', 'other.test']);
  const server = tls.createServer({ key: cert.key, cert: cert.cert }, (s) => s.end('from tls.test\n'));
  const tlsPort = await listen(server);
  t.teardown(() => server.close());

  const open = async (name: string): Promise<net.Socket> => {
    const res = await rawRequest(report.port, `CONNECT tls.test:${tlsPort} HTTP/1.1\r\nHost: tls.test:${tlsPort}\r\n\r\n`);
    t.equal(res.status, 200, 'the tunnel opens');
    res.socket.resume();
    const client = tls.connect({ socket: res.socket, servername: name, rejectUnauthorized: false });
    client.on('error', () => undefined);
    return client;
  };
  const good = await open('tls.test');
  t.match(await readUntil(good, 'from tls.test'), 'from tls.test');
  good.destroy();
  const other = await open('other.test');
  await new Promise((resolve) => other.once('close', resolve));
  const lines = decisions(report.logs, 'tls.test');
  t.match(lines[0], { decision: 'allow', would_deny: 'host_not_allowed', tunnel: 'tls', sni: 'tls.test' });
  t.match(lines[1], { decision: 'deny', reason: 'sni_mismatch', would_deny: 'host_not_allowed' }, 'a hello naming another host is refused in report mode too');
});

t.test('the metrics: would-deny decisions counted by reason, and report mode shown', async (t) => {
  t.ok(((await metricValue(EGRESS_METRICS.wouldDeny, '{reason="host_not_allowed"}')) ?? 0) >= 2, 'host_not_allowed counted (plain HTTP and tunnels)');
  t.equal(await metricValue(EGRESS_METRICS.wouldDeny, '{reason="port_not_allowed"}'), 1, 'port_not_allowed counted once');
  t.equal(await metricValue(EGRESS_METRICS.reportMode, ''), 1, 'report mode is on');
  const enforced = await enforce.proxy.metrics.metrics();
  t.match(enforced, new RegExp(`^${EGRESS_METRICS.reportMode} 0$`, 'm'), 'enforce mode shows 0');
  t.notMatch(enforced, new RegExp(`^${EGRESS_METRICS.wouldDeny}\\{`, 'm'), 'and counts no would-deny');
});

t.test('a reload into enforce mode: the same host is refused, and the gauge follows', async (t) => {
  const { policyOf } = await import('../support/test-proxy.js');
  report.proxy.setPolicy(policyOf({ allowHosts: ['listed.test'], connectPorts: [443], testHosts }));
  t.teardown(() => report.proxy.setPolicy(policyOf({ allowHosts: ['listed.test'], connectPorts: [443], testHosts, mode: 'report' })));
  const res = await rawRequest(report.port, `GET http://unlisted.test:${webPort}/ HTTP/1.1\r\nHost: unlisted.test:${webPort}\r\n\r\n`);
  t.equal(res.reason, 'host_not_allowed');
  t.equal(await metricValue(EGRESS_METRICS.reportMode, ''), 0);
});
