/**
 * The findings of the turn-3 red team, each against the real engine behind the real socket proxy
 * (the breadth, profile and log-driver findings are cases of socket-proxy-cases.test.ts: T40,
 * K04, T01-T12, K10, K11):
 * - a volume driver name that is a path: a container serves Docker's plugin protocol on a socket
 *   in its cap- volume, and the create naming it is refused before dockerd ever dials it;
 * - slots: 1,100 stops of a container that ignores SIGTERM are held, and /_ping still answers
 *   within a second;
 * - a body check that fails (an error, a loop, out of memory) refuses: HAProxy goes on with the
 *   next rule after a failed Lua action, so only a verdict the check set itself may pass;
 * - the proxy image loads exactly the repository's Lua files (what the unit tests and the fuzzer
 *   run under lua5.4).
 */
import t from 'tap';
import net from 'node:net';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE, type DockerTestEnv } from '../support/docker.js';
import { send, serialise, type RawCase } from './raw-http.js';
import { HAPROXY_DIR } from './lua-checker.js';

const NODE_IMAGE = TEST_LOCAL_IMAGE;
const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** The hardening profile every container create must carry. */
function hardened(env: DockerTestEnv, cmd: string[], hostConfig: Record<string, unknown> = {}): string {
  return JSON.stringify({
    Image: NODE_IMAGE, Cmd: cmd, Labels: env.labels,
    HostConfig: {
      NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true, PidsLimit: 64,
      Memory: 128 * 1024 * 1024, MemorySwap: 128 * 1024 * 1024, CgroupnsMode: 'private', IpcMode: 'private', ...hostConfig,
    },
  });
}

function post(path: string, body: string | null = null): RawCase {
  return { method: 'POST', path, headers: body === null ? {} : JSON_HEADERS, body };
}

t.test('a volume driver that names a plugin socket in a cap- volume is refused before dockerd dials it', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, NODE_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const volume = env.name('plug');
  const server = env.name('plugsrv');
  t.equal((await send(proxy.socketPath, post('/v1.41/volumes/create', JSON.stringify({ Name: volume, Labels: env.labels })))).status, 201);
  // Docker's plugin protocol on <volume>/evil.sock. Every call is written down and answered 500:
  // should a create ever get through, activation fails and dockerd forgets the plugin again, so
  // no plugin is left registered on the engine whatever the proxy does.
  // (One line: a create body is printable ASCII.)
  const plugin = "const fs = require('fs'), http = require('http'); " +
    "http.createServer((req, res) => { fs.appendFileSync('/plug/calls', req.method + ' ' + req.url + ' '); res.statusCode = 500; res.end('{\"Err\":\"refused by the test plugin\"}'); })" +
    ".listen('/plug/evil.sock', () => fs.writeFileSync('/plug/ready', ''));";
  const created = await send(proxy.socketPath, post(`/v1.41/containers/create?name=${server}`,
    hardened(env, ['/usr/bin/node', '-e', plugin], { Mounts: [{ Type: 'volume', Source: volume, Target: '/plug', VolumeOptions: { NoCopy: true } }] })));
  t.equal(created.status, 201, `the plugin server is an ordinary hardened container (${created.body.toString('utf8')})`);
  t.equal((await send(proxy.socketPath, post(`/v1.41/containers/${server}/start`))).status, 204);
  const mountpoint = (await env.docker.getVolume(volume).inspect()).Mountpoint;
  for (const deadline = Date.now() + 15_000; !readdirSync(mountpoint).includes('ready'); await sleep(50)) {
    if (Date.now() > deadline) throw new Error('the plugin socket did not appear');
  }
  t.ok(statSync(join(mountpoint, 'evil.sock')).isSocket(), 'a plugin socket inside a cap- volume');
  // dockerd looks for a legacy plugin at /run/docker/plugins/<name>.sock, joining the name as a path.
  const driver = relative('/run/docker/plugins', join(mountpoint, 'evil'));
  t.match(driver, /^\.\.\//);

  const attempts: Array<{ name: string; req: RawCase; deny: string }> = [
    { name: 'volume create', req: post('/v1.41/volumes/create', JSON.stringify({ Name: env.name('y'), Driver: driver, Labels: env.labels })), deny: 'bad_value:Driver' },
    { name: 'volume create, driver with a trailing slash', req: post('/v1.41/volumes/create', JSON.stringify({ Name: env.name('y2'), Driver: `${driver}/` })), deny: 'bad_value:Driver' },
    {
      name: 'container create, driver of a mount',
      req: post(`/v1.41/containers/create?name=${env.name('m')}`, hardened(env, ['true'], {
        Mounts: [{ Type: 'volume', Source: env.name('y3'), Target: '/y', VolumeOptions: { DriverConfig: { Name: driver } } }],
      })),
      deny: 'forbidden_key:Mounts.VolumeOptions.DriverConfig',
    },
    { name: 'container create, VolumeDriver', req: post(`/v1.41/containers/create?name=${env.name('v')}`, hardened(env, ['true'], { VolumeDriver: driver })), deny: 'forbidden_key:VolumeDriver' },
  ];
  for (const a of attempts) {
    const res = await send(proxy.socketPath, a.req);
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, a.deny], `${a.name}: refused by the proxy`);
    t.notOk(res.headers['api-version'], `${a.name}: dockerd never saw it`);
  }
  await sleep(500);
  t.notOk(readdirSync(mountpoint).includes('calls'), 'dockerd never dialled the plugin socket');
  for (const name of [env.name('y'), env.name('y2'), env.name('y3')]) {
    t.equal(await env.docker.getVolume(name).inspect().then(() => true, () => false), false, `no volume ${name}`);
  }
});

t.test('1,100 held stops take a bounded share of the connections: /_ping answers within a second', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, NODE_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const name = env.name('stubborn');
  // PID 1 that ignores SIGTERM: every stop waits its full t before the kill.
  const body = hardened(env, ['/usr/bin/node', '-e', 'process.on("SIGTERM", () => {}); setInterval(() => {}, 1e9)']);
  t.equal((await send(proxy.socketPath, post(`/v1.41/containers/create?name=${name}`, body))).status, 201);
  t.equal((await send(proxy.socketPath, post(`/v1.41/containers/${name}/start`))).status, 204);

  const CALLS = 1100;
  const stop = serialise(post(`/v1.41/containers/${name}/stop?t=60`));
  const answers: string[] = [];
  const sockets: net.Socket[] = [];
  t.teardown(() => { for (const s of sockets) s.destroy(); });
  for (let i = 0; i < CALLS; i++) {
    const s = net.connect(proxy.socketPath);
    sockets.push(s);
    let head = '';
    s.on('data', (chunk: Buffer) => {
      if (head.includes('\r\n\r\n')) return;
      head += chunk.toString('latin1');
      if (head.includes('\r\n\r\n')) answers.push(head);
    });
    s.on('error', () => undefined);
    s.write(stop);
  }
  // Everything past the cap is refused at once; what is left is held by the engine. Judged once
  // the refusals of all but the cap's 256 have come and then no more for a moment, 20 s at most
  // (the stops' own 60 s end well after): a pause of the answers alone, the proxy or this process
  // busy for 200 ms on a loaded machine, could end the wait with refusals still to come.
  let settled = -1;
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await sleep(200)) {
    if (answers.length === settled && settled >= CALLS - 256) break;
    settled = answers.length;
  }
  const refused = answers.filter((h) => /^HTTP\/1\.1 429 /.test(h) && /x-socket-proxy-deny: too_many_long_calls:wait/i.test(h)).length;
  t.comment(`${CALLS} stops sent: ${refused} refused at once (429), ${CALLS - answers.length} held by the engine`);
  t.equal(answers.length, refused, 'every answer so far is the refusal of a call over the cap');
  t.ok(CALLS - answers.length <= 256, `at most 256 stops held (${CALLS - answers.length})`);
  t.ok(CALLS - answers.length >= 200, `the held stops are really held (${CALLS - answers.length})`);

  const latencies: number[] = [];
  try {
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      const status = await send(proxy.socketPath, { method: 'GET', path: '/_ping', headers: {}, body: null }, 5_000)
        .then((r) => r.status, (err: Error) => err.message);
      latencies.push(Math.round(performance.now() - started));
      t.equal(status, 200, `ping ${i + 1} answered`);
    }
    t.comment(`/_ping while the stops are held: ${latencies.join(', ')} ms`);
    t.ok(Math.max(...latencies) < 1000, `/_ping within a second (${Math.max(...latencies)} ms)`);
    t.equal(CALLS - answers.length > 0, true, 'the stops were still held while /_ping answered');
  } finally {
    // Let the held stops end: kill the container on the engine itself.
    await env.docker.getContainer(name).kill().catch(() => undefined);
  }
});

t.test('a body check that fails refuses: error, endless loop, out of memory', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const dir = mkdtempSync(join(tmpdir(), 'capybara-broken-check-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const rows = [
    { name: 'an error', code: "error('the checker broke')" },
    { name: 'an endless loop (HAProxy stops it after its Lua timeout)', code: 'while true do end' },
    { name: 'out of memory (tune.lua.maxmem)', code: "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end" },
  ];
  for (const [i, row] of rows.entries()) {
    // A body-check.lua whose check never finishes normally, in place of the real one.
    const file = join(dir, `body-check-${i}.lua`);
    writeFileSync(file, `return { check = function() ${row.code} end }\n`);
    chmodSync(file, 0o644);
    const proxy = await startSocketProxy(t, env, { binds: [`${file}:/etc/haproxy/body-check.lua:ro`] });
    const started = Date.now();
    // HAProxy counts the Lua timeout (1 s) in running time: on a loaded machine the wall time is longer.
    const res = await send(proxy.socketPath, post('/v1.41/volumes/create', JSON.stringify({ Name: env.name(`broken${i}`), Labels: env.labels })), 90_000);
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, 'body_check_failed'], `${row.name}: refused (${Date.now() - started} ms)`);
    t.notOk(res.headers['api-version'], `${row.name}: dockerd never saw it`);
    t.equal((await send(proxy.socketPath, { method: 'GET', path: '/_ping', headers: {}, body: null })).status, 200, `${row.name}: the proxy still serves`);
  }
});

t.test('a network proof that fails refuses: error, endless loop, out of memory, an answer that never ends', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const dir = mkdtempSync(join(tmpdir(), 'capybara-broken-proof-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // A sandbox network, named by its id: only a proof that ran to its end could let the request on.
  const network = await env.docker.createNetwork({ Name: env.name('proved-net'), Labels: env.labels, Internal: true });
  const rows = [
    { name: 'an error', judge: "function() error('the proof broke') end" },
    { name: 'an endless loop (HAProxy stops it after its Lua timeout)', judge: 'function() while true do end end' },
    { name: 'out of memory (tune.lua.maxmem)', judge: "function() local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end end" },
    // The question goes to a dockerd endpoint that never finishes its answer: the proof's own
    // deadline ends the wait, and the real judge refuses what came. Events of a label nothing
    // carries: all of them would keep a busy engine's answer moving (the deadline is HAProxy's
    // server timeout, an idle one), and the test hung while other tests made containers.
    { name: 'an answer that never ends', judge: 'real.judge', path: "function() return '/events?filters=%7B%22label%22%3A%5B%22dev.capybara.test.never%3D1%22%5D%7D' end" },
  ];
  const real = readFileSync(join(HAPROXY_DIR, 'network-proof.lua'), 'utf8');
  writeFileSync(join(dir, 'real-proof.lua'), real);
  chmodSync(join(dir, 'real-proof.lua'), 0o644);
  for (const [i, row] of rows.entries()) {
    const file = join(dir, `network-proof-${i}.lua`);
    writeFileSync(file, `local real = require('real-proof')\nreturn { OK = real.OK, is_id = real.is_id, path = ${row.path ?? 'real.path'}, judge = ${row.judge} }\n`);
    chmodSync(file, 0o644);
    const proxy = await startSocketProxy(t, env, { binds: [`${file}:/etc/haproxy/network-proof.lua:ro`, `${join(dir, 'real-proof.lua')}:/etc/haproxy/real-proof.lua:ro`] });
    const started = Date.now();
    const res = await send(proxy.socketPath, { method: 'GET', path: `/v1.41/networks/${network.id}`, headers: {}, body: null }, 90_000);
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, 'network_proof_failed'], `${row.name}: refused (${Date.now() - started} ms)`);
    t.notOk(res.headers['api-version'], `${row.name}: the request never reached dockerd`);
    t.equal((await send(proxy.socketPath, { method: 'GET', path: '/_ping', headers: {}, body: null })).status, 200, `${row.name}: the proxy still serves`);
  }
});

t.test('a sandbox\'s name server: one private address passes and Docker keeps its embedded DNS; near-misses never reach dockerd', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, NODE_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  // A sandbox network as the controller makes it: internal, no host address, a subnet of its own.
  const network = env.name('dns-net');
  await env.docker.createNetwork({
    Name: network, Labels: env.labels, Internal: true, CheckDuplicate: true,
    Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' },
    IPAM: { Config: [{ Subnet: '10.213.254.240/28', IPRange: '10.213.254.240/29' }] },
  });
  const refusals = [
    { name: 'a loopback server', hostConfig: { Dns: ['127.0.0.53'] }, reason: 'bad_value:Dns' },
    { name: 'a public server', hostConfig: { Dns: ['1.1.1.1'] }, reason: 'bad_value:Dns' },
    { name: 'a second server', hostConfig: { Dns: ['10.213.254.254', '10.213.254.253'] }, reason: 'too_broad:Dns' },
    { name: 'resolver options', hostConfig: { Dns: ['10.213.254.254'], DnsOptions: ['ndots:5'] }, reason: 'forbidden_key:DnsOptions' },
    { name: 'a search domain', hostConfig: { Dns: ['10.213.254.254'], DnsSearch: ['corp.example'] }, reason: 'forbidden_key:DnsSearch' },
    { name: 'extra hosts', hostConfig: { ExtraHosts: ['pypi.org:10.213.254.254'] }, reason: 'forbidden_key:ExtraHosts' },
  ];
  for (const [i, row] of refusals.entries()) {
    const res = await send(proxy.socketPath, post(`/v1.41/containers/create?name=${env.name(`dns-bad${i}`)}`, hardened(env, ['true'], { NetworkMode: network, ...row.hostConfig })));
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, row.reason], `${row.name}: refused`);
    t.notOk(res.headers['api-version'], `${row.name}: dockerd never saw it`);
  }
  const name = env.name('dns-ok');
  const created = await send(proxy.socketPath, post(`/v1.41/containers/create?name=${name}`, hardened(env, ['cat', '/etc/resolv.conf'], { NetworkMode: network, Dns: ['10.213.254.254'] })));
  t.equal(created.status, 201, `the egress proxy's fixed address as the name server (${created.body.toString('utf8')})`);
  const container = env.docker.getContainer(name);
  t.same((await container.inspect()).HostConfig.Dns, ['10.213.254.254']);
  await container.start();
  await container.wait();
  // The embedded DNS stays the container's resolver: it answers the network's container names and
  // forwards the rest to the address above, from the container's own network namespace.
  t.match(demux(await container.logs({ stdout: true, stderr: false })), /^nameserver 127\.0\.0\.11$/m, 'resolv.conf still names the embedded DNS');
});

t.test('the proxy image loads exactly the repository\'s Lua files and rules', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const files = readdirSync(HAPROXY_DIR).filter((f) => f.endsWith('.lua') || f === 'haproxy.cfg' || f === 'routes.map');
  t.ok(files.filter((f) => f.endsWith('.lua')).length >= 4, files.join(', '));
  for (const file of files) {
    const c = await env.docker.createContainer({
      name: env.name(`cat-${file.replace(/[^a-z0-9]/gi, '')}`), Image: SOCKET_PROXY_IMAGE, Cmd: ['cat', `/etc/haproxy/${file}`],
      Labels: env.labels, HostConfig: { NetworkMode: 'none', CapDrop: ['ALL'], ReadonlyRootfs: true },
    });
    await c.start();
    await c.wait();
    const logs = await c.logs({ stdout: true, stderr: false });
    t.equal(demux(logs), readFileSync(join(HAPROXY_DIR, file), 'utf8'), `${file}: the image has the repository's version (rebuild: bash scripts/build-images.sh proxy)`);
    await c.remove({ force: true });
  }
});

/** Docker's log stream without a TTY: 8-byte frame headers before each chunk. */
function demux(buf: Buffer): string {
  const parts: Buffer[] = [];
  for (let at = 0; at + 8 <= buf.length; at += 8 + buf.readUInt32BE(at + 4)) parts.push(buf.subarray(at + 8, at + 8 + buf.readUInt32BE(at + 4)));
  return Buffer.concat(parts).toString('utf8');
}
