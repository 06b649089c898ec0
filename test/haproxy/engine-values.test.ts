/**
 * The values dockerd treats as instructions, against the real engine behind the real socket proxy
 * (SECURITY.md, section 2, "values, not shapes"), each judged by its effect on the host, not by the
 * status code alone: the volume copy-up race that wrote host directories as root (through the proxy,
 * and with the controller's own bodies on a shared persistent workspace), pulls that made dockerd
 * read host-loopback services and passed their answers back, networks with inter-container traffic
 * or a route out, limits past any host's, and removals that held dockerd without a slot. Every link
 * planted points at a scratch directory the test made; nothing is sent off the machine.
 */
import t from 'tap';
import type { Test } from 'tap';
import http from 'node:http';
import net from 'node:net';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE, TEST_PROXY_IMAGES, type DockerTestEnv } from '../support/docker.js';
import { fileNeeds, needUnmet, toolMissing } from '../support/needs.js';
import { loopbackName, loopbackNameProblem } from '../support/loopback-name.js';
import { send, serialise, type RawCase } from './raw-http.js';
import { DockerEngine } from '../../controller/docker/engine.js';
import { createDockerSandbox, isSandboxError } from '../../controller/index.js';
import { IMAGES } from '../../common/index.js';

await fileNeeds(t, 'engine');

const MIB = 1024 * 1024;
const JSON_HEADERS = { 'Content-Type': 'application/json' };
const post = (path: string, body: unknown = null): RawCase => ({ method: 'POST', path, headers: body === null ? {} : JSON_HEADERS, body: body === null ? null : JSON.stringify(body) });

/** A create body with the hardening profile; `hostConfig` adds to (or replaces) its HostConfig. */
function hardened(env: DockerTestEnv, image: string, cmd: string[], hostConfig: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    Image: image, User: '0:0', Cmd: cmd, Labels: env.labels,
    HostConfig: {
      NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true, PidsLimit: 64,
      Memory: 128 * MIB, MemorySwap: 128 * MIB, CgroupnsMode: 'private', IpcMode: 'private', ...hostConfig,
    },
  };
}

/** A root-only scratch directory on the host (under /run: root's all the way up) and what it holds now. */
function scratchDir(t: Test, env: DockerTestEnv): { path: string; state(): string } {
  const path = mkdtempSync(`/run/cap-${env.runId}-host-`);
  t.teardown(() => rmSync(path, { recursive: true, force: true }));
  const state = (): string => `mode ${(statSync(path).mode & 0o7777).toString(8)}, owner ${statSync(path).uid}, entries [${readdirSync(path).join(',')}]`;
  return { path, state };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

t.test('the copy-up race: a volume mount without NoCopy is refused, and with it nothing reaches the host', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, IMAGES.sandbox, TEST_LOCAL_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const engine = new DockerEngine({ endpoint: proxy.endpoint });
  const host = scratchDir(t, env);
  const before = host.state();
  const volume = env.name('shared-vol');
  t.equal((await send(proxy.socketPath, post('/v1.41/volumes/create', { Name: volume, Labels: env.labels }))).status, 201, '1. a cap- volume');
  const a = env.name('planter');
  const mount = (target: string, noCopy: boolean | undefined): Record<string, unknown> =>
    ({ Type: 'volume', Source: volume, Target: target, ...(noCopy === undefined ? {} : { VolumeOptions: { NoCopy: noCopy } }) });
  t.equal((await send(proxy.socketPath, post(`/v1.41/containers/create?name=${a}`, hardened(env, IMAGES.sandbox, ['sleep', 'infinity'], { Mounts: [mount('/vv', true)] })))).status, 201);
  t.equal((await send(proxy.socketPath, post(`/v1.41/containers/${a}/start`))).status, 204, '2. container A runs with it at /vv');
  // The red team's planter: once dockerd's copy has begun (/vv/bin appears), /vv/sbin becomes a
  // link to the host directory, before the copy gets there.
  const planter = await engine.startExec(a, {
    cmd: ['bash', '-c', `for i in $(seq 1 1500); do if [ -e /vv/bin ]; then ln -s ${host.path} /vv/sbin && echo planted; exit 0; fi; sleep 0.01; done; echo never`],
    user: '0:0', onOutput: () => undefined,
  });
  let planted = '';
  const watching = engine.startExec(a, { cmd: ['bash', '-c', 'sleep 16; ls /vv'], user: '0:0', onOutput: (_s, c) => (planted += c.toString()) });

  const b = env.name('copier');
  for (const [what, noCopy, reason] of [['no VolumeOptions', undefined, 'nocopy_required'], ['NoCopy false', false, 'nocopy_required']] as const) {
    const res = await send(proxy.socketPath, post(`/v1.41/containers/create?name=${b}`, hardened(env, TEST_LOCAL_IMAGE, ['true'], { Mounts: [mount('/usr', noCopy)] })));
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, reason], `3. container B with the volume at /usr, ${what}: refused`);
  }
  t.equal(await env.docker.getContainer(b).inspect().then(() => true, () => false), false, 'no container B exists');
  const allowed = await send(proxy.socketPath, post(`/v1.41/containers/create?name=${b}`, hardened(env, TEST_LOCAL_IMAGE, ['true'], { Mounts: [mount('/usr', true)] })));
  // dockerd copies at create (daemon/create_unix.go, populateVolumes): the create is the step.
  t.equal(allowed.status, 201, 'B with NoCopy is created');
  t.equal(await planter.finished, 0);
  await watching.then((w) => w.finished);
  t.equal(planted.trim(), '', 'the volume stayed empty: nothing of the image was copied into it, so nothing was planted');
  t.equal(host.state(), before, `the host directory is as it was (${before})`);
});

t.test('a persistent workspace shared by two sandboxes (the controller\'s own bodies): nothing is copied, nothing reaches the host', async (t) => {
  const image = (runId: string): string => `capybara-sandbox-workspace-test:${runId}`;
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, IMAGES.sandbox]);
  if (!env) return;
  const noCli = toolMissing('docker', ['version', '--format', '{{.Client.Version}}'], 'apt-get install docker.io');
  if (noCli !== undefined) return needUnmet(t, noCli);
  // A sandbox image with content at /workspace, which dockerd used to copy into an empty volume.
  const dockerfile = [
    `FROM ${IMAGES.sandbox}`,
    'USER 0',
    'RUN mkdir -p /workspace/a /workspace/z && for i in $(seq 1 3000); do echo $i > /workspace/a/f$i; done && chown -R 1000:1000 /workspace',
    'USER sandbox',
    ...Object.entries(env.labels).map(([k, v]) => `LABEL ${k}=${v}`),
  ].join('\n');
  execFileSync('docker', ['build', '--quiet', '--pull=false', '--network=none', '-t', image(env.runId), '-'], { input: dockerfile, stdio: ['pipe', 'ignore', 'pipe'], env: { ...process.env, DOCKER_BUILDKIT: '0' } });
  t.teardown(() => env.docker.getImage(image(env.runId)).remove({ force: true }).catch(() => undefined));
  const proxy = await startSocketProxy(t, env, { images: [...TEST_PROXY_IMAGES, image(env.runId)] });
  const host = scratchDir(t, env);
  const before = host.state();
  const config = { endpoint: proxy.endpoint, network: `capshared${env.runId}` };
  const shared = createDockerSandbox({ ...config, sharedWorkspaces: true }, { labels: env.labels }, { logger: pino({ level: 'silent' }) });
  const spec = (n: string) => ({ id: `${env.runId}-${n}`, image: image(env.runId), limits: { egress: 'none' as const }, workspace: { key: `ws-${env.runId}`, durability: 'persistent' as const } });
  t.teardown(() => env.docker.getVolume(`cap-ws.ws-${env.runId}`).remove({ force: true }).catch(() => undefined));

  const first = await shared.create(spec('one'));
  t.equal((await shared.exec(first, 'ls -A /workspace | wc -l; stat -c %U /workspace')).stdout, '0\nsandbox\n', 'the first sandbox\'s workspace starts empty (no copy of the image\'s) and its own');
  // The first sandbox waits for the second's copy to begin, then turns /workspace/z into a link to
  // the host directory, as the red team's planter did.
  await shared.exec(first, `setsid bash -c 'for i in $(seq 1 1500); do if [ -e /workspace/a ]; then rm -rf /workspace/z; ln -s ${host.path} /workspace/z; echo planted > /workspace/.planter; exit; fi; sleep 0.01; done' >/dev/null 2>&1 < /dev/null &`);
  const second = await shared.create(spec('two'));
  await sleep(2_000);
  t.equal((await shared.exec(second, 'ls -A /workspace | wc -l')).stdout, '0\n', 'the second sandbox gets the volume as it is: none of its image\'s /workspace');
  t.equal(host.state(), before, `the host directory is as it was (${before})`);

  const exclusive = createDockerSandbox(config, { labels: env.labels }, { logger: pino({ level: 'silent' }) });
  const refused = await exclusive.create(spec('three')).catch((e: unknown) => e);
  t.ok(isSandboxError(refused, 'workspace_in_use'), `without sharedWorkspaces a third sandbox is refused while one holds it: ${String(refused)}`);
  for (const h of [first, second]) await shared.destroy(h);
});

/** An HTTP server on loopback that stands for a host service: it counts requests and answers `answer`. */
async function hostService(t: Test, answer: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<{ port: number; requests(): number }> {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests += 1;
    answer(req, res);
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, requests: () => requests };
}

t.test('pulls: never from the host\'s loopback, and no registry\'s answer comes back', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const noRoot = loopbackNameProblem();
  if (noRoot !== undefined) return needUnmet(t, noRoot);
  const secret = `token-${env.runId}-host-service`;
  const leak = await hostService(t, (_req, res) => res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`not found; ${secret}`));
  const redirect = await hostService(t, (_req, res) => res.writeHead(302, { Location: `http://127.0.0.1:${leak.port}/internal` }).end());
  const name = await loopbackName(t, env.runId);
  const proxy = await startSocketProxy(t, env, { registries: `${name}:${leak.port},${name}:${redirect.port}` });
  const pull = (ref: string) => send(proxy.socketPath, post(`/v1.41/images/create?fromImage=${encodeURIComponent(ref)}`), 60_000);

  const direct = await pull(`127.0.0.1:${leak.port}/x:latest`);
  t.same([direct.status, direct.headers['x-socket-proxy-deny']], [403, `registry_not_allowed:127.0.0.1:${leak.port}`], 'a pull from the host\'s loopback is refused');
  t.equal(leak.requests(), 0, 'and the host service never saw dockerd');

  for (const [what, port] of [['a listed registry that answers with its secret', leak.port], ['a listed registry that redirects to a host service', redirect.port]] as const) {
    const before = leak.requests();
    const res = await pull(`${name}:${port}/x:latest`);
    const text = `${res.status} ${JSON.stringify(res.headers)} ${res.body.toString('utf8')}`;
    t.ok(res.headers['api-version'], `${what}: dockerd answered (${res.status})`);
    t.ok(leak.requests() > before, `${what}: dockerd did fetch from the host service`);
    t.notMatch(text, secret, `${what}: its answer is not passed back`);
    t.match(res.body.toString('utf8'), 'does not pass on what the registry answered', `${what}: a fixed sentence instead`);
  }
});

t.test('networks: the shared one only without inter-container traffic, every other one internal', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, IMAGES.sandbox, IMAGES.egress]);
  if (!env) return;
  const shared = `capshared${env.runId}`;
  const proxy = await startSocketProxy(t, env, { sharedNetwork: shared });
  const rows = [
    { what: 'the shared network with inter-container traffic on', body: { Name: shared, CheckDuplicate: true, Driver: 'bridge', Options: { 'com.docker.network.bridge.enable_icc': 'true' } }, deny: 'network_option_required:enable_icc' },
    { what: 'the shared network without options', body: { Name: shared, CheckDuplicate: true, Driver: 'bridge' }, deny: 'network_option_required:enable_icc' },
    { what: 'a cap- network with NAT out', body: { Name: env.name('nat'), CheckDuplicate: true, Driver: 'bridge' }, deny: 'network_option_required:Internal' },
  ];
  for (const row of rows) {
    const res = await send(proxy.socketPath, post('/v1.41/networks/create', { ...row.body, Labels: env.labels }));
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, row.deny], `${row.what}: refused`);
    t.equal(await env.docker.getNetwork(row.body.Name).inspect().then(() => true, () => false), false, `${row.what}: no such network exists`);
  }
  // Made by someone else with traffic between containers on: the controller does not use it.
  await env.docker.createNetwork({ Name: shared, Driver: 'bridge', Labels: env.labels });
  const provider = createDockerSandbox({ endpoint: proxy.endpoint, network: shared }, { labels: env.labels }, { logger: pino({ level: 'silent' }) });
  const err = await provider.create({ id: `${env.runId}-icc`, image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'] } }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'network_not_isolated'), String(err));
  const members = (await env.docker.getNetwork(shared).inspect() as { Containers?: Record<string, unknown> }).Containers ?? {};
  t.same(Object.keys(members), [], 'no egress proxy joined it');
  t.same(await env.docker.listContainers({ all: true, filters: { name: [`${env.runId}-icc`] } }), [], 'nothing of the sandbox was left');
});

t.test('limits: refused above the ceilings, in force at them (the cgroup files say so)', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, IMAGES.sandbox]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env, { env: { SOCKET_PROXY_MAX_PIDS: '128', SOCKET_PROXY_MAX_MEMORY: '512' } });
  const create = (name: string, pids: number, memory: number) => send(proxy.socketPath, post(`/v1.41/containers/create?name=${name}`,
    hardened(env, IMAGES.sandbox, ['sleep', 'infinity'], { PidsLimit: pids, Memory: memory, MemorySwap: memory })));
  for (const [what, pids, memory, deny] of [
    ['a pids limit past the host\'s pid_max', 4194304, 256 * MIB, 'limit_above_ceiling:PidsLimit'],
    ['one pid above the ceiling', 129, 256 * MIB, 'limit_above_ceiling:PidsLimit'],
    ['2^63 - 4096 bytes of memory', 64, 9223372036854771712, 'limit_above_ceiling:Memory'],
    ['one MiB above the ceiling', 64, 513 * MIB, 'limit_above_ceiling:Memory'],
  ] as const) {
    const name = env.name(`lim${pids}-${memory % 1000}`);
    const res = await create(name, pids, memory);
    t.same([res.status, res.headers['x-socket-proxy-deny']], [403, deny], `${what}: refused`);
    t.equal(await env.docker.getContainer(name).inspect().then(() => true, () => false), false, `${what}: no container`);
  }
  const name = env.name('at-ceiling');
  t.equal((await create(name, 128, 512 * MIB)).status, 201, 'at the ceilings: created');
  t.equal((await send(proxy.socketPath, post(`/v1.41/containers/${name}/start`))).status, 204);
  const engine = new DockerEngine({ endpoint: proxy.endpoint });
  let out = '';
  const run = await engine.startExec(name, { cmd: ['cat', '/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'], user: '0:0', onOutput: (_s, c) => (out += c.toString()) });
  t.equal(await run.finished, 0);
  t.equal(out, `128\n${512 * MIB}\n`, 'the cgroup holds the container to them');
});

t.test('removals are long calls: past 256 held at once, refused at once; /_ping answers within a second', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, IMAGES.sandbox]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  // A volume whose removal keeps dockerd's lock on it for seconds: 250,000 files.
  const volume = env.name('many-files');
  await env.docker.createVolume({ Name: volume, Labels: env.labels });
  const filler = await env.docker.createContainer({
    Image: IMAGES.sandbox, User: '0:0', Cmd: ['bash', '-c', 'cd /v && seq 1 250000 | xargs touch'], Labels: env.labels,
    HostConfig: { Binds: [`${volume}:/v`], NetworkMode: 'none' },
  });
  await filler.start();
  await filler.wait();
  await filler.remove();

  const CALLS = 320;
  const removal = serialise({ method: 'DELETE', path: `/v1.41/volumes/${volume}`, headers: {}, body: null });
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
    s.write(removal);
  }
  const started = performance.now();
  const ping = await send(proxy.socketPath, { method: 'GET', path: '/_ping', headers: {}, body: null }, 5_000);
  const pingMs = Math.round(performance.now() - started);
  t.equal(ping.status, 200, `/_ping answered in ${pingMs} ms while the removals ran`);
  t.ok(pingMs < 1000, `within a second (${pingMs} ms)`);
  for (const deadline = Date.now() + 60_000; answers.length < CALLS && Date.now() < deadline;) await sleep(100);
  const refused = answers.filter((h) => /^HTTP\/1\.1 429 /.test(h) && /x-socket-proxy-deny: too_many_long_calls:removal/i.test(h)).length;
  t.comment(`${CALLS} removals of one volume at once: ${refused} refused at once (429), ${answers.length} answered in all`);
  t.ok(refused >= CALLS - 256 - 16, `the removals past the cap were refused (${refused})`);
  t.ok(refused <= CALLS - 200, `the others reached dockerd (${CALLS - refused})`);
  t.equal(await env.docker.getVolume(volume).inspect().then(() => true, () => false), false, 'and the volume was removed');
});
