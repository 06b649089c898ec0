/**
 * Transparent mode as an operator turns it on, through the built `capybara-egress` command and its
 * environment (the egress image's way): bad settings stop it at start with a message naming the
 * flag or variable; good ones bring up DNS and the TLS listener (with a port map) before the proxy
 * port, and a real resolver and curl reach an allowlisted TLS server through them. As root, the
 * default ports (53, 80, 443) are bound. Runs the built command (`npm test` builds first).
 */
import { execFile, spawn } from 'node:child_process';
import { promises as dns } from 'node:dns';
import https from 'node:https';
import net from 'node:net';
import t, { type Test } from 'tap';
import { EGRESS_ENV } from '../../common/index.js';
import { minOpenFiles, openFilesFor, planDescriptors } from '../../proxy/budget/fd-budget.js';
import { DNS_LIMITS } from '../../proxy/dns/index.js';
import { freePort, listen } from '../support/loopback.js';
import { rawRequest } from '../support/raw-client.js';
import { needUnmet, toolMissing } from '../support/needs.js';
import { EGRESS_BASE_ENV, EGRESS_CLI, plainNode, runEgressCli } from '../support/plain-node.js';
import { settle } from '../support/settle.js';
import { selfSignedCert } from '../support/tls-cert.js';

// Every test starts proxies of its own (own ports): they run side by side.
t.jobs = 3;
/** A loopback address of this run's own, so that parallel test files never share one. */
const ADDRESS = `127.${20 + Math.floor(Math.random() * 200)}.${Math.floor(Math.random() * 250) + 1}.${Math.floor(Math.random() * 250) + 1}`;

const T = EGRESS_ENV;
const failures: { name: string; args: string[]; env?: Record<string, string>; message: RegExp }[] = [
  { name: 'an answer address without transparent mode', args: ['--transparent-answer', '10.0.0.2'], message: /--transparent-answer is set but transparent mode is off: give --transparent-listen IP \(EGRESS_TRANSPARENT_LISTEN\)/ },
  { name: 'a port map without transparent mode', args: [], env: { [T.transparentPortMap]: '443=8443' }, message: /EGRESS_TRANSPARENT_PORT_MAP is set but transparent mode is off/ },
  { name: 'listening on every address without an answer address', args: [], env: { [T.transparentListen]: '0.0.0.0' }, message: /EGRESS_TRANSPARENT_LISTEN is 0\.0\.0\.0: give --transparent-answer IP/ },
  { name: 'an IPv6 listen address', args: ['--transparent-listen', '::1'], message: /--transparent-listen: expected an IPv4 address \(transparent mode is IPv4 only\)/ },
  { name: 'a name as the listen address', args: ['--transparent-listen', 'egress.local'], message: /--transparent-listen: expected an IPv4 address/ },
  { name: 'an unspecified answer address', args: ['--transparent-listen', '10.0.0.2', '--transparent-answer', '0.0.0.0'], message: /--transparent-answer: expected a unicast IPv4 address/ },
  { name: 'a multicast answer address', args: ['--transparent-listen', '10.0.0.2'], env: { [T.transparentAnswer]: '224.0.0.1' }, message: /EGRESS_TRANSPARENT_ANSWER: expected a unicast IPv4 address/ },
  { name: 'a map item that is no pair', args: ['--transparent-listen', '10.0.0.2', '--transparent-port-map', '443:8443'], message: /--transparent-port-map: "443:8443" is not DIALLED=LISTEN/ },
  { name: 'a map item with a bad port', args: ['--transparent-listen', '10.0.0.2', '--transparent-port-map', '443=70000'], message: /"443=70000" is not DIALLED=LISTEN/ },
  { name: 'a port mapped twice', args: ['--transparent-listen', '10.0.0.2'], env: { [T.transparentPortMap]: '443=8443,443=9443' }, message: /EGRESS_TRANSPARENT_PORT_MAP: port 443 is mapped twice/ },
  { name: 'a mapped port that is not served', args: ['--transparent-listen', '10.0.0.2', '--transparent-port-map', '22=2222'], message: /--transparent-port-map \(EGRESS_TRANSPARENT_PORT_MAP\): maps port 22, which is neither 53 \(DNS\) nor a connect port \(80,443\)/ },
  { name: 'two ports on one', args: ['--transparent-listen', '10.0.0.2', '--transparent-port-map', '443=80'], message: /ports 80 and 443 would both listen on 80/ },
];
for (const c of failures) {
  t.test(`start-up fails closed: ${c.name}`, async (t) => {
    const res = await runEgressCli(['--allow-hosts', 'a.example', ...c.args], c.env);
    t.equal(res.status, 2, 'exits 2');
    t.match(res.stderr, c.message);
  });
}

t.test('a transparent port already taken stops the proxy at start', async (t) => {
  const taken = net.createServer();
  const port = await listen(taken);
  t.teardown(() => taken.close());
  const res = await runEgressCli(['--allow-hosts', 'a.example', '--listen', `127.0.0.1:${await freePort()}`, '--connect-ports', String(port), '--transparent-listen', '127.0.0.1', '--transparent-port-map', `53=${await freePort()}`]);
  t.equal(res.status, 2);
  t.match(res.stderr, /cannot listen: --transparent-listen \(EGRESS_TRANSPARENT_LISTEN\): .*EADDRINUSE/);
});

/** Starts the command; resolves with its log lines once it says it is listening. */
async function startProxy(t: Test, args: string[], env: Record<string, string>, nofile?: number): Promise<Record<string, unknown>[]> {
  const [file, argv] = plainNode(EGRESS_CLI, args);
  const command: [string, string[]] = nofile === undefined ? [file, argv] : ['prlimit', [`--nofile=${nofile}:${nofile}`, '--', file, ...argv]];
  const child = spawn(...command, { env: { ...EGRESS_BASE_ENV, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = '';
  let rest = '';
  child.stdout.on('data', (d: Buffer) => {
    rest += d.toString();
    const parts = rest.split('\n');
    rest = parts.pop() ?? '';
    for (const p of parts) if (p) lines.push(JSON.parse(p) as Record<string, unknown>);
  });
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  await settle(() => lines.some((l) => l.event === 'listening') || child.exitCode !== null, 'the proxy listening', 15_000);
  if (child.exitCode !== null) throw new Error(`the proxy exited ${child.exitCode}: ${stderr}`);
  return lines;
}

t.test('the command in transparent mode: DNS and TLS on their own address, before the proxy port', async (t) => {
  const curlMissing = toolMissing('curl', ['--version'], 'apt-get install curl');
  if (curlMissing !== undefined) return needUnmet(t, curlMissing);
  const server = https.createServer(selfSignedCert(['tls.test']), (req, res) => res.end(`hello ${req.url}\n`));
  const upstream = await listen(server as unknown as net.Server);
  t.teardown(() => {
    server.close();
    server.closeAllConnections();
  });
  const [dnsPort, tlsPort, proxyPort] = [await freePort(), await freePort(), await freePort()];
  const lines = await startProxy(t, ['--listen', `127.0.0.1:${proxyPort}`, '--connect-ports', String(upstream)], {
    [T.allowHosts]: 'tls.test',
    [T.testHosts]: JSON.stringify({ 'tls.test': '127.0.0.1' }),
    [T.transparentListen]: ADDRESS,
    [T.transparentPortMap]: `53=${dnsPort},${upstream}=${tlsPort}`,
  });
  const events = lines.map((l) => l.event);
  t.ok(events.indexOf('transparent_listening') < events.indexOf('listening'), 'the transparent listeners first');
  t.match(lines.find((l) => l.event === 'transparent_listening'), { address: ADDRESS, answer: ADDRESS, ports: [`dns:53=${dnsPort}`, `tls:${upstream}=${tlsPort}`] });

  // One try, so that a proxy that stays silent fails here (ETIMEOUT, not ENOTFOUND), with a timeout
  // that the proxy, a process of its own on a loaded machine, still answers within.
  const resolver = new dns.Resolver({ timeout: 4_000, tries: 1 });
  resolver.setServers([`${ADDRESS}:${dnsPort}`]);
  t.same(await resolver.resolve4('tls.test'), [ADDRESS], 'an allowed name resolves to the proxy');
  const started = Date.now();
  await t.rejects(resolver.resolve4('example.com'), { code: 'ENOTFOUND' }, 'another name does not resolve');
  t.ok(Date.now() - started < 2_500, `at once (${Date.now() - started} ms)`);
  const out = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile('curl', ['-sSk', '--max-time', '5', '--connect-to', `tls.test:${upstream}:${ADDRESS}:${tlsPort}`, `https://tls.test:${upstream}/x`], (err, stdout, stderr) => resolve({ code: err ? 1 : 0, stdout, stderr })));
  t.same([out.code, out.stdout], [0, 'hello /x\n'], out.stderr);
});

t.test('as root, the default ports: 53 (UDP and TCP), 80 and 443', async (t) => {
  if (process.getuid?.() !== 0) return needUnmet(t, 'binding ports 53, 80 and 443 on the host needs root');
  const lines = await startProxy(t, ['--listen', `127.0.0.1:${await freePort()}`], { [T.allowHosts]: 'a.example', [T.transparentListen]: ADDRESS });
  t.match(lines.find((l) => l.event === 'transparent_listening'), { ports: ['dns:53', 'http:80', 'tls:443'] });
  const resolver = new dns.Resolver({ timeout: 4_000, tries: 1 });
  resolver.setServers([ADDRESS]);
  t.same(await resolver.resolve4('a.example'), [ADDRESS]);
});

// The DNS responder's TCP connections hold a descriptor each, up to their cap: the open-file plan
// keeps that many aside in transparent mode, so that they never take the descriptors the client
// connections and the lookups were promised.
t.test('transparent mode keeps descriptors for the DNS responder\'s TCP connections', async (t) => {
  const reserved = DNS_LIMITS.maxTcpTotal;
  const tooFew = minOpenFiles(reserved) - 1;
  const refused = await runEgressCli(['--allow-hosts', 'a.example', '--listen', '127.0.0.1:0', '--transparent-listen', ADDRESS, '--transparent-port-map', `53=${await freePort()}`], {}, tooFew);
  t.equal(refused.status, 2, `a limit of ${tooFew} stops it at start`);
  t.match(refused.stderr, `open-file limit is ${tooFew}, and the proxy needs at least ${minOpenFiles(reserved)} (${reserved} of them for the DNS responder's TCP connections in transparent mode)`);

  const nofile = minOpenFiles(reserved) + 16;
  t.same(planDescriptors(nofile, 16_384, reserved), { maxConnections: 5, maxLookupsInFlight: 5 });
  // Every port mapped to one of its own: the test beside it binds this address's default ports.
  const [dnsPort, proxyPort, connectPort, tlsPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const lines = await startProxy(t, ['--allow-hosts', 'a.example', '--listen', `127.0.0.1:${proxyPort}`, '--connect-ports', String(connectPort)], { [T.transparentListen]: ADDRESS, [T.transparentPortMap]: `53=${dnsPort},${connectPort}=${tlsPort}` }, nofile);
  t.match(lines.find((l) => l.event === 'limits_lowered'), { openFileLimit: nofile, maxConnections: 5, maxLookupsInFlight: 5, needed: openFilesFor(16_384, reserved) });

  // Every DNS connection the responder takes (its cap per client from enough client addresses),
  // then every client connection: the health check still has its descriptor.
  const clients = reserved / DNS_LIMITS.maxTcpPerClient;
  const dnsHeld = await Promise.all(
    Array.from({ length: reserved }, (_, i) =>
      new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect({ host: ADDRESS, port: dnsPort, localAddress: `127.9.${Math.floor(i / DNS_LIMITS.maxTcpPerClient) % clients}.1` }, () => resolve(s));
        s.once('error', reject);
      }),
    ),
  );
  t.teardown(() => dnsHeld.forEach((s) => s.destroy()));
  await new Promise((r) => setTimeout(r, 300));
  t.equal(dnsHeld.filter((s) => s.destroyed || s.readyState !== 'open').length, 0, `all ${reserved} DNS connections held open`);
  const held = await Promise.all(
    Array.from({ length: 5 }, () =>
      new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(proxyPort, '127.0.0.1', () => resolve(s));
        s.once('error', reject);
      }),
    ),
  );
  t.teardown(() => held.forEach((s) => s.destroy()));
  const sixth = await rawRequest(proxyPort, 'CONNECT a.example:443 HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(sixth.reason, 'too_many_connections', 'the sixth client connection refused at the cap');
  sixth.socket.destroy();
  const health = await rawRequest(proxyPort, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(health.status, 200, 'the health check answers');
  health.socket.destroy();
});
