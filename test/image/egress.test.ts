/**
 * The egress image (capybara-sandbox-egress:latest) end to end, on networks this test creates:
 *
 *   client ── net A (internal) ── egress ── net B (internal) ── upstream
 *
 * The client has only net A, so the upstream is reachable only through the egress container, which
 * pins the name upstream.test to the upstream's address (CAPYBARA_EGRESS_TEST_HOSTS) and allows
 * only that name (EGRESS_ALLOW_HOSTS). Every address involved belongs to a container made here.
 */
import t from 'tap';
import type Docker from 'dockerode';
import { dockerTest } from '../support/docker.js';
import { IMAGES } from '../../common/index.js';
import { fileNeeds } from '../support/needs.js';

await fileNeeds(t, 'engine');

const IMAGE = IMAGES.egress;

/** Answers every request and logs its path, so the test can count what reached it. */
const UPSTREAM = `require('http').createServer((q, s) => { console.log(q.url); s.end('upstream-ok ' + q.url); }).listen(80)`;

/** Runs in the client container; prints one JSON line with every observation. */
const CLIENT = (egressIp: string, opaqueIp: string, upstreamIp: string) => `
const http = require('http'), net = require('net');
const proxy = { host: ${JSON.stringify(egressIp)}, port: 3128 };
const opaque = { host: ${JSON.stringify(opaqueIp)}, port: 3128 };
const viaProxy = (url) => new Promise((done) => {
  const req = http.request({ ...proxy, path: url, headers: { Host: new URL(url).host }, timeout: 10000 }, (res) => {
    let body = ''; res.on('data', (d) => body += d);
    res.on('end', () => done({ status: res.statusCode, reason: res.headers['x-egress-reason'] || null, body }));
  });
  req.on('error', (e) => done({ error: e.code || e.message }));
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.end();
});
const tunnel = (via, host) => new Promise((done) => {
  const req = http.request({ ...via, method: 'CONNECT', path: host + ':80', timeout: 10000 });
  req.on('connect', (res, socket) => {
    if (res.statusCode !== 200) { socket.destroy(); return done({ status: res.statusCode }); }
    let body = ''; socket.on('data', (d) => body += d); socket.on('close', () => done({ status: 200, body }));
    socket.on('error', () => undefined);
    socket.write('GET /tunnel HTTP/1.1\\r\\nHost: ' + host + '\\r\\nConnection: close\\r\\n\\r\\n');
  });
  req.on('error', (e) => done({ error: e.code || e.message }));
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.end();
});
const direct = (ip) => new Promise((done) => {
  const s = net.connect({ host: ip, port: 80, timeout: 3000 });
  s.on('connect', () => { s.destroy(); done({ connected: true }); });
  s.on('error', (e) => done({ connected: false, error: e.code }));
  s.on('timeout', () => { s.destroy(); done({ connected: false, error: 'timeout' }); });
});
(async () => {
  const out = {
    allowed: await viaProxy('http://upstream.test/hello'),
    blocked: await viaProxy('http://blocked.test/'),
    tunnel: await tunnel(opaque, 'upstream.test'),
    plainInTlsTunnel: await tunnel(proxy, 'upstream.test'),
    direct: await direct(${JSON.stringify(upstreamIp)}),
  };
  console.log(JSON.stringify(out));
})();
`;

t.test('egress image between an internal client network and an upstream', async (t) => {
  const env = await dockerTest(t, [IMAGE]);
  if (!env) return;
  const { docker } = env;
  const netA = env.name('egress-client-net');
  const netB = env.name('egress-upstream-net');
  for (const Name of [netA, netB]) {
    await docker.createNetwork({ Name, Driver: 'bridge', Internal: true, Labels: env.labels });
  }

  const upstream = await run(docker, {
    name: env.name('egress-upstream'), Image: IMAGE, User: '0', Entrypoint: ['node'], Cmd: ['-e', UPSTREAM],
    Labels: env.labels, HostConfig: { NetworkMode: netB },
  });
  const upstreamIp = await ipOn(upstream, netB);

  // Two proxies: the default (a tunnel must start with a TLS ClientHello naming its host) and
  // one whose entries default to opaque tunnels (any bytes).
  const startEgress = async (suffix: string, extraEnv: string[]): Promise<Docker.Container> => {
    const c = await docker.createContainer({
      name: env.name(suffix), Image: IMAGE, Labels: env.labels,
      Env: [
        'EGRESS_ALLOW_HOSTS=upstream.test',
        `CAPYBARA_EGRESS_TEST_HOSTS=${JSON.stringify({ 'upstream.test': upstreamIp })}`,
        ...extraEnv,
      ],
      HostConfig: { NetworkMode: netA, ReadonlyRootfs: true, CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] },
    });
    await docker.getNetwork(netB).connect({ Container: c.id });
    await c.start();
    return c;
  };
  const egress = await startEgress('egress', []);
  const opaque = await startEgress('egress-opaque', ['EGRESS_TUNNEL_DEFAULT=opaque']);
  const egressIp = await ipOn(egress, netA);
  const opaqueIp = await ipOn(opaque, netA);
  t.equal(await waitHealthy(opaque, 45_000), 'healthy');

  const health = await waitHealthy(egress, 45_000);
  t.equal(health, 'healthy', 'the image health check (node asking /healthz) reports healthy');
  const info = await egress.inspect();
  t.equal(info.Config.User, 'egress', 'runs as the egress user');
  t.ok(info.Config.Env.includes('EGRESS_LISTEN=0.0.0.0:3128'), 'listens on all interfaces through EGRESS_LISTEN');
  const first = await execOut(egress, ['sh', '-c', 'grep "^Max core file size" /proc/1/limits; readlink /proc/1/exe']);
  t.match(first, /^Max core file size\s+0\s+0\s+bytes\s*\n/, 'no core file, soft or hard: a crash writes neither the CA key nor a secret anywhere');
  t.match(first, /\n\/usr\/bin\/node\s*$/, 'node is the container\'s first process (the shell handed over)');

  const client = await run(docker, {
    name: env.name('egress-client'), Image: IMAGE, Entrypoint: ['node'], Cmd: ['-e', CLIENT(egressIp, opaqueIp, upstreamIp)],
    Labels: env.labels, HostConfig: { NetworkMode: netA },
  });
  await client.wait();
  const logs = (await client.logs({ stdout: true, stderr: true })).toString('utf8');
  const start = logs.indexOf('{"allowed"');
  t.ok(start >= 0, 'client printed its observations');
  if (start < 0) { t.comment(logs); return; }
  const seen = JSON.parse(logs.slice(start, logs.indexOf('\n', start))) as Record<string, Record<string, unknown>>;
  t.match(seen.allowed, { status: 200, body: 'upstream-ok /hello' }, 'allowed host reached through the proxy');
  t.match(seen.blocked, { status: 403, reason: 'host_not_allowed' }, 'host not on the allowlist: 403 with its reason');
  t.match(seen.tunnel, { status: 200, body: /upstream-ok \/tunnel/ }, 'opaque CONNECT tunnel to the allowed host carries plain bytes');
  t.notMatch(seen.plainInTlsTunnel, { body: /upstream-ok/ }, 'by default a tunnel that does not start with TLS reaches nothing');
  const reached = (await upstream.logs({ stdout: true })).toString('utf8').match(/\/[a-z]+/g);
  t.same(reached, ['/hello', '/tunnel'], 'the upstream saw the plain request and the opaque tunnel only');
  t.match(seen.direct, { connected: false }, 'a direct connection to the upstream without the proxy fails');
});

t.test("the image's command starts from the code cache its own node wrote at build", async (t) => {
  const env = await dockerTest(t, [IMAGE]);
  if (!env) return;
  // The launcher's own loader, asked whether V8 took the cache, on the check of the default policy.
  const script = "import { runBundle } from '/opt/capybara-egress/dist/proxy/launch/index.js';"
    + " process.argv = [process.execPath, 'capybara-egress.mjs', 'check', 'policy/default-policy.yaml'];"
    + " process.stderr.write('fromCache=' + runBundle('/opt/capybara-egress/dist/proxy/capybara-egress.cjs') + '\\n');";
  const c = await run(env.docker, {
    name: env.name('egress-code-cache'), Image: IMAGE, Entrypoint: ['sh', '-c'],
    Cmd: [`stat -c '%U %a' dist/proxy/capybara-egress.cjs.cache && node --input-type=module -e "${script}"`],
    Labels: env.labels, HostConfig: { NetworkMode: 'none', ReadonlyRootfs: true },
  });
  const { StatusCode } = (await c.wait()) as { StatusCode: number };
  const logs = (await c.logs({ stdout: true, stderr: true })).toString('utf8');
  t.equal(StatusCode, 0, logs);
  t.match(logs, /\broot 644\b/, 'the cache is root\'s, and only readable to the proxy user');
  t.match(logs, /fromCache=true/, "V8 takes it: written by the image's node, for this bundle");
  t.match(logs, /default-policy\.yaml: valid/, 'the command ran');
});

/** What `cmd` prints, run in `c` with a terminal (one stream, nothing to demultiplex). */
async function execOut(c: Docker.Container, cmd: string[]): Promise<string> {
  const exec = await c.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true, Tty: true });
  const stream = await exec.start({ hijack: true, stdin: false, Tty: true });
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8').replace(/\r\n/g, '\n');
}

async function run(docker: Docker, opts: Docker.ContainerCreateOptions): Promise<Docker.Container> {
  const c = await docker.createContainer(opts);
  await c.start();
  return c;
}

async function ipOn(c: Docker.Container, network: string): Promise<string> {
  const ip = (await c.inspect()).NetworkSettings.Networks[network]?.IPAddress;
  if (!ip) throw new Error(`container has no address on ${network}`);
  return ip;
}

async function waitHealthy(c: Docker.Container, ms: number): Promise<string> {
  const deadline = Date.now() + ms;
  let status = 'none';
  while (Date.now() < deadline) {
    const state = (await c.inspect()).State as { Health?: { Status: string }; Running: boolean };
    status = state.Health?.Status ?? 'none';
    if (status === 'healthy' || !state.Running) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  return status;
}
