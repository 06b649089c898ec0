/**
 * The mount race of stop 42, end to end through the real HAProxy to the real engine. Debian images
 * have `/var/run -> /run`, so volumes at `/run` and `/var/run/p/q` look like siblings as text and
 * nest in the container. For every archive call dockerd bind-mounts the container's volumes on the
 * host, resolving each target through the ones it mounted already: a second container that shares
 * the outer volume swaps a directory in it for a symlink to a host path at the right moment, and
 * the inner volume is mounted, read-write and for good, over that host directory.
 *
 * The proxy must refuse the container whose volumes could nest (several volumes, each at one of the
 * controller's own targets: haproxy/docker-schema.lua). Should a change admit it again, the test
 * runs the race itself, with the archive call the proxy admits, against a scratch directory of its
 * own standing in for /etc/cron.d, and judges the host's mount table.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import t, { type Test } from 'tap';
import type Docker from 'dockerode';
import { registrationArchive, TENANTS_DIR } from '../../common/index.js';
import { dockerTest, SOCKET_PROXY_IMAGE, startSocketProxy, TEST_LOCAL_IMAGE } from '../support/docker.js';
import { fileNeeds } from '../support/needs.js';
import { HAPROXY_DIR } from './lua-checker.js';
import { send, type RawCase } from './raw-http.js';

await fileNeeds(t, 'engine');

const RACE_ATTEMPTS = 1000;

const json = (method: string, path: string, body?: unknown): RawCase => ({
  method,
  path,
  headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
  body: body === undefined ? null : JSON.stringify(body),
});

const volume = (Source: string, Target: string) => ({ Type: 'volume', Source, Target, VolumeOptions: { NoCopy: true } });

/** Every value here is one the proxy admits for a sandbox: dropped capabilities, a read-only root, no network. */
const hardened = (Mounts: unknown[]) => ({
  NetworkMode: 'none',
  CapDrop: ['ALL'],
  SecurityOpt: ['no-new-privileges'],
  ReadonlyRootfs: true,
  PidsLimit: 64,
  Memory: 256 * 1024 * 1024,
  MemorySwap: 256 * 1024 * 1024,
  CgroupnsMode: 'private',
  IpcMode: 'private',
  Mounts,
});

/**
 * A container of an image merely from a listed registry with a volume: the proxy refuses it
 * (mount_image_not_listed), so it is made straight on the engine, as one made before that rule or
 * of an image listed by name with such symlinks would be, for the archive rules to meet.
 */
async function madeAnyway(t: Test, env: DockerEnv, call: (req: RawCase) => ReturnType<typeof send>, name: string, body: Record<string, unknown>): Promise<void> {
  const target = (body.HostConfig as { Mounts: Array<{ Target: string }> }).Mounts[0]?.Target ?? '';
  const res = await call(json('POST', `/v1.41/containers/create?name=${name}`, body));
  t.same([res.status, res.headers['x-socket-proxy-deny']], [403, `mount_image_not_listed:${target}`], `the proxy makes no ${name}: a volume in a container of a registry's image`);
  if (res.status !== 201) await env.docker.createContainer({ name, ...body } as unknown as Parameters<typeof env.docker.createContainer>[0]);
}

/**
 * Whether a start failed only because the racer swapped a path runc was mounting: runc refuses a
 * path that became a symlink ("possibly malicious path"), or follows a swapped-in symlink to a host
 * path that does not exist in the container's root ("error mounting ... no such file or directory"),
 * or its mount (or the propagation change after it, through /proc/self/fd) meets a path swapped
 * since ("error mounting ... invalid argument", twice in twelve runs here).
 */
const lostToRacer = (message: string): boolean =>
  /OCI runtime create failed/.test(message) && /possibly malicious path|no such file or directory|not a directory|error mounting .* invalid argument/.test(message);

/**
 * Starts `container` directly on the engine while the racer swaps its network files' paths in the
 * shared volume, trying again until a start falls between two swaps (CI lost a start to each of
 * the two refusals once).
 */
async function startedPastRacer(container: Docker.Container): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await container.start();
      return;
    } catch (err) {
      if (attempt >= 50 || !lostToRacer((err as Error).message)) throw err;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

function mountedAt(path: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((line) => line.split(' ')[4] === path);
}

/**
 * The racer: swaps `swapped` (a path in its volume at /a) between a directory holding `inner` and
 * a symlink to `hostDir`, as fast as it can.
 */
function racerScript(hostDir: string, swapped = '/a/p', inner = 'q'): string {
  const parent = swapped.slice(0, swapped.lastIndexOf('/'));
  return [
    "const fs = require('fs');",
    'const mv = (a, b) => { try { fs.renameSync(a, b); } catch {} };',
    'const there = (p) => { try { fs.lstatSync(p); return true; } catch { return false; } };',
    `const [parent, swapped, dir, link] = ${JSON.stringify([parent, swapped, `${parent}/dir`, `${parent}/link`])};`,
    'fs.mkdirSync(parent, { recursive: true });',
    'for (;;) {',
    `  if (!there(dir)) fs.mkdirSync(dir + ${JSON.stringify(`/${inner}`)}, { recursive: true });`,
    `  if (!there(link)) fs.symlinkSync(${JSON.stringify(hostDir)}, link);`,
    // dockerd creates a missing mount point itself: cleared, and the swapping goes on.
    '  fs.rmSync(swapped, { recursive: true, force: true });',
    '  for (let i = 0; i < 200; i++) { mv(dir, swapped); mv(swapped, dir); mv(link, swapped); mv(swapped, link); }',
    '}',
  ].join(' ');
}

/** The workspace hand-over's archive, as the controller sends it. */
function workspaceArchive(): Buffer {
  return execFileSync('lua5.4', ['-e', `package.path = "${HAPROXY_DIR}/?.lua;" .. package.path; io.stdout:write(require("workspace-owner").ARCHIVE)`]);
}

/** One archive call into `container`, raw (the fixed tar as latin1 text). */
function archiveCall(container: string, archive: Buffer): RawCase {
  const path = `/v1.41/containers/${container}/archive?path=%2Fworkspace`;
  return {
    method: 'PUT',
    path,
    headers: {},
    body: null,
    raw: `PUT ${path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nContent-Type: application/x-tar\r\nContent-Length: ${archive.length}\r\n\r\n${archive.toString('latin1')}`,
  };
}

/** Builds `image` from `dockerfile` (in a context directory named after `prefix`), removed after the test. */
function builtImage(t: Test, image: string, prefix: string, dockerfile: string): void {
  const context = mkdtempSync(join(tmpdir(), prefix));
  writeFileSync(join(context, 'Dockerfile'), dockerfile);
  execFileSync('docker', ['build', '-q', '-t', image, context], { stdio: 'pipe' });
  t.teardown(() => {
    execFileSync('docker', ['rmi', '-f', image], { stdio: 'pipe' });
    rmSync(context, { recursive: true, force: true });
  });
}

/** An empty root-only directory on the host at `path`, removed after the test. */
function emptyHostDir(t: Test, path: string): string {
  mkdirSync(path, { recursive: true });
  chmodSync(path, 0o700);
  t.teardown(() => rmSync(path, { recursive: true, force: true }));
  return path;
}

/**
 * For a victim the proxy admitted after all: a racer sharing `volume` (at /a) swaps `swapped` for a
 * symlink to `hostDir` while the victim is started again and again, until something appears in
 * `hostDir` or 400 starts (two minutes) have passed; the test then judges the host directory.
 */
async function raceVictim(t: Test, env: DockerEnv, call: (req: RawCase) => ReturnType<typeof send>, race: { volume: string; hostDir: string; swapped: string }): Promise<void> {
  const racer = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('racer')}`, {
      Image: TEST_LOCAL_IMAGE,
      User: '0',
      Cmd: ['/usr/bin/node', '-e', racerScript(race.hostDir, race.swapped, 'q')],
      Labels: env.labels,
      HostConfig: hardened([volume(race.volume, '/a')]),
    }),
  );
  t.equal(racer.status, 201, 'the racer is created');
  t.equal((await call(json('POST', `/v1.41/containers/${env.name('racer')}/start`))).status, 204, 'the racer runs');
  const deadline = Date.now() + 120_000;
  for (let i = 0; i < 400 && Date.now() < deadline && readdirSync(race.hostDir).length === 0; i++) {
    await call(json('POST', `/v1.41/containers/${env.name('victim')}/start`));
    await env.docker.getContainer(env.name('victim')).wait().catch(() => undefined);
  }
  await call(json('POST', `/v1.41/containers/${env.name('racer')}/kill`));
}

/** A root-only directory on the host with `inner` in it, standing in for /etc/cron.d; removed (and unmounted) after. */
function hostDirectory(t: Test, runId: string, inner: string): { hostDir: string; target: string } {
  const hostDir = `/run/cap-${runId}-host`;
  const target = join(hostDir, inner);
  mkdirSync(target, { recursive: true });
  chmodSync(hostDir, 0o700);
  t.teardown(() => {
    while (mountedAt(target)) execFileSync('umount', ['-l', target]);
    rmSync(hostDir, { recursive: true, force: true });
  });
  return { hostDir, target };
}

t.test('two volumes an image symlink nests are refused, so no archive call can mount one over a host directory', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const call = (req: RawCase) => send(proxy.socketPath, req);

  const { hostDir, target } = hostDirectory(t, env.runId, 'q');

  for (const v of ['a', 'b', 'w']) {
    const made = await call(json('POST', '/v1.41/volumes/create', { Name: env.name(v), Labels: env.labels }));
    t.equal(made.status, 201, `volume ${v} is created`);
  }
  const racer = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('racer')}`, {
      Image: TEST_LOCAL_IMAGE,
      User: '0',
      Cmd: ['/usr/bin/node', '-e', racerScript(hostDir)],
      Labels: env.labels,
      HostConfig: hardened([volume(env.name('a'), '/a')]),
    }),
  );
  t.equal(racer.status, 201, `the racer is an ordinary hardened container with one volume (${racer.headers['x-socket-proxy-deny'] ?? ''})`);
  t.equal((await call(json('POST', `/v1.41/containers/${env.name('racer')}/start`))).status, 204, 'the racer runs');

  const victim = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('victim')}`, {
      Image: TEST_LOCAL_IMAGE,
      Cmd: ['true'],
      Labels: env.labels,
      HostConfig: hardened([volume(env.name('a'), '/run'), volume(env.name('b'), '/var/run/p/q'), volume(env.name('w'), '/workspace')]),
    }),
  );
  t.equal(victim.status, 403, 'the container with /run and /var/run/p/q volumes is refused');
  t.match(victim.headers['x-socket-proxy-deny'], /^mount_target_not_allowed/, 'for a volume outside the controller targets');

  if (victim.status === 201) {
    // Admitted after all: the workspace hand-over's archive call, the one the proxy lets through,
    // again and again, each making dockerd mount the volumes on the host.
    const archive = workspaceArchive();
    for (let i = 0; i < RACE_ATTEMPTS && !mountedAt(target) && readdirSync(target).length === 0; i++) await call(archiveCall(env.name('victim'), archive));
  }
  t.notOk(mountedAt(target), `no volume is mounted over the host directory ${target}`);
  t.same(existsSync(target) ? readdirSync(target) : [], [], 'the host directory is as it was');
});

t.test('an archive into a container whose tmpfs mount an image symlink leads into its volume is refused', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const call = (req: RawCase) => send(proxy.socketPath, req);
  t.equal((await call(json('POST', '/v1.41/volumes/create', { Name: env.name('a'), Labels: env.labels }))).status, 201);
  // One volume and a tmpfs mount the image's /var/run -> /run leads into it: for an archive call
  // dockerd would unmount /var/run/b on the host through the volume's content, wherever a symlink
  // there pointed (a review detached a host mount so). The create is refused now (runc makes the
  // tmpfs mount point inside the volume at every start: the next test), so the container is made
  // on the engine itself, and the archive proof must still refuse it.
  const body = {
    Image: TEST_LOCAL_IMAGE,
    Cmd: ['true'],
    Labels: env.labels,
    HostConfig: hardened([volume(env.name('a'), '/run'), { Type: 'tmpfs', Target: '/var/run/b' }]),
  };
  const made = await call(json('POST', `/v1.41/containers/create?name=${env.name('t')}`, body));
  t.same([made.status, made.headers['x-socket-proxy-deny']], [403, 'mount_target_not_allowed:/run'], 'the create is refused');
  await env.docker.createContainer({ name: env.name('t'), ...body } as unknown as Parameters<typeof env.docker.createContainer>[0]);
  const res = await call(archiveCall(env.name('t'), workspaceArchive()));
  t.same([res.status, res.headers['x-socket-proxy-deny']], [403, 'archive_mount_not_allowed:/run'], 'the archive is refused for the container\'s mounts');
  t.notOk(res.headers['api-version'], 'dockerd never saw it');
});

t.test('a tmpfs mount an image symlink leads into a volume is refused, so runc never makes its mount point on the host', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  const proxy = await startSocketProxy(t, env);
  const call = (req: RawCase) => send(proxy.socketPath, req);
  // An empty root-only directory on the host: runc must never create anything in it.
  const hostDir = emptyHostDir(t, `/run/cap-${env.runId}-mkdir`);
  t.equal((await call(json('POST', '/v1.41/volumes/create', { Name: env.name('a'), Labels: env.labels }))).status, 201);
  // The victim: a volume at /run and a tmpfs at /var/run/p/q. runc 1.1.5 resolves the tmpfs target
  // (to /run/p/q, inside the volume), then makes it with os.MkdirAll on that path; the racer, which
  // shares the volume, swaps p for a symlink to hostDir in between (CVE-2024-45310). A review made
  // runc create a directory on the host so within 23 starts.
  const victim = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('victim')}`, {
      Image: TEST_LOCAL_IMAGE,
      Cmd: ['true'],
      Labels: env.labels,
      HostConfig: { ...hardened([volume(env.name('a'), '/run')]), Tmpfs: { '/var/run/p/q': 'nosuid,nodev,size=1m' } },
    }),
  );
  t.same([victim.status, victim.headers['x-socket-proxy-deny']], [403, 'mount_target_not_allowed:/run'], 'the victim is refused');
  if (victim.status === 201) {
    // Admitted again by some change: run the race, and let the host directory judge it.
    await raceVictim(t, env, call, { volume: env.name('a'), hostDir, swapped: '/a/p' });
  }
  t.same(readdirSync(hostDir), [], 'nothing was created in the host directory');
});

t.test('a tmpfs that the symlink of an image from a listed registry leads into a volume is refused, so runc never makes its mount point on the host', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  // An image of a listed registry is anyone's who can push there: its symlinks are none the proxy
  // knows (S.IMAGE_SYMLINKED names the listed images' own). `/opt -> /workspace/o` puts a tmpfs at
  // /opt/p/q inside a volume at /workspace, whatever the two texts say.
  const image = `registry.example/capybara-test/opt-link-${env.runId}:1`;
  builtImage(t, image, 'cap-optlink-', `FROM ${TEST_LOCAL_IMAGE}\nRUN rm -rf /opt && ln -s /workspace/o /opt\n`);
  const proxy = await startSocketProxy(t, env, { registries: 'registry.example' });
  const call = (req: RawCase) => send(proxy.socketPath, req);
  // An empty root-only directory on the host: runc must never create anything in it.
  const hostDir = emptyHostDir(t, `/run/cap-${env.runId}-optlink`);
  t.equal((await call(json('POST', '/v1.41/volumes/create', { Name: env.name('w'), Labels: env.labels }))).status, 201);
  // The victim: the workspace volume and a tmpfs at /opt/p/q (the sandbox's own shape has /tmp and
  // Init beside its workspace). Without the rule the proxy admitted it, and a racer sharing the
  // volume made runc create q in the host directory within 10 starts (a review).
  const victim = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('victim')}`, {
      Image: image,
      Cmd: ['true'],
      Labels: env.labels,
      HostConfig: { ...hardened([volume(env.name('w'), '/workspace')]), Tmpfs: { '/opt/p/q': 'nosuid,nodev,size=1m' } },
    }),
  );
  t.same([victim.status, victim.headers['x-socket-proxy-deny']], [403, 'mount_image_not_listed:/workspace'], 'the victim is refused');
  if (victim.status === 201) {
    await raceVictim(t, env, call, { volume: env.name('w'), hostDir, swapped: '/a/o/p' });
  }
  t.same(readdirSync(hostDir), [], 'nothing was created in the host directory');
  // Nor with its volume alone: another image of the registry may lay it over /etc (next tests).
  const alone = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('alone')}.handover`, { Image: image, Cmd: ['true'], Labels: env.labels, HostConfig: hardened([volume(env.name('w'), '/workspace')]) }),
  );
  t.same([alone.status, alone.headers['x-socket-proxy-deny']], [403, 'mount_image_not_listed:/workspace'], 'a one-volume container of the image is refused too');
});

t.test('an image whose symlinks nest the controller\'s targets: its sandbox receives no archive, and a one-volume container of it cannot be raced', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  // `/opt -> /workspace/o` puts /opt/capybara/skills inside the workspace volume: the controller's
  // own three volumes then nest, and another container sharing the workspace steers the inner mount
  // (a review won in 3 to 22 archive calls with such an image listed exactly).
  const image = `registry.example/capybara-test/symlinked-${env.runId}:1`;
  builtImage(t, image, 'cap-symlinked-', `FROM ${TEST_LOCAL_IMAGE}\nRUN rm -rf /opt && ln -s /workspace/o /opt\n`);
  const proxy = await startSocketProxy(t, env, { registries: 'registry.example' });
  const call = (req: RawCase) => send(proxy.socketPath, req);
  const { hostDir, target } = hostDirectory(t, env.runId, 'skills');
  for (const v of ['w', 's']) t.equal((await call(json('POST', '/v1.41/volumes/create', { Name: env.name(v), Labels: env.labels }))).status, 201);
  const racer = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('racer')}`, {
      Image: TEST_LOCAL_IMAGE,
      User: '0',
      Cmd: ['/usr/bin/node', '-e', racerScript(hostDir, '/a/o/capybara', 'skills')],
      Labels: env.labels,
      HostConfig: hardened([volume(env.name('w'), '/a')]),
    }),
  );
  t.equal(racer.status, 201, 'the racer shares the workspace volume');
  t.equal((await call(json('POST', `/v1.41/containers/${env.name('racer')}/start`))).status, 204);
  // The controller's own mount shape (container-spec.ts), from the registry's image.
  const victim = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('victim')}`, {
      Image: image,
      Cmd: ['true'],
      Labels: env.labels,
      HostConfig: hardened([volume(env.name('w'), '/workspace'), volume(env.name('s'), '/skills'), volume(env.name('s'), '/opt/capybara/skills')]),
    }),
  );
  // Refused at create: an image merely from a listed registry has a volume only alone. Made (by an
  // image listed by name with such symlinks, or a change), it would still receive no archive.
  t.same([victim.status, victim.headers['x-socket-proxy-deny']], [403, 'mount_image_not_listed:/workspace'], 'a container of the registry\'s image with three volumes is refused');
  const archive = workspaceArchive();
  const first = await call(archiveCall(env.name('victim'), archive));
  t.ok([403, 404].includes(first.status), `the archive is refused (${first.status} ${first.headers['x-socket-proxy-deny'] ?? ''})`);
  if (first.status !== 403 && first.status !== 404) {
    for (let i = 0; i < RACE_ATTEMPTS && !mountedAt(target) && readdirSync(target).length === 0; i++) await call(archiveCall(env.name('victim'), archive));
  }
  // The controller's hand-over container (sandbox/workspace-handover.ts), of the same image: the
  // workspace its one mount point. The archive goes in, as often as the racer likes, and no other
  // mount exists for the racer to steer.
  await madeAnyway(t, env, call, `${env.name('victim')}.handover`, { Image: image, Cmd: ['true'], Labels: env.labels, HostConfig: hardened([volume(env.name('w'), '/workspace')]) });
  const statuses = new Set<number>();
  for (let i = 0; i < RACE_ATTEMPTS / 10 && !mountedAt(target) && readdirSync(target).length === 0; i++) statuses.add((await call(archiveCall(`${env.name('victim')}.handover`, archive))).status);
  t.same([...statuses], [200], 'it receives every archive');
  t.notOk(mountedAt(target), `no volume is mounted over the host directory ${target}`);
  t.same(readdirSync(target), [], 'the host directory is as it was');
});


/**
 * The racer for dockerd's own network files: swaps each of `names` (in its volume at /a) between a
 * regular file and a symlink to `hostFile`, as fast as it can.
 */
function networkFileRacerScript(hostFile: string, names: readonly string[]): string {
  return [
    "const fs = require('fs');",
    'const mv = (a, b) => { try { fs.renameSync(a, b); } catch {} };',
    `const [target, names] = ${JSON.stringify([hostFile, names])};`,
    'for (;;) for (const n of names) {',
    "  const [p, f, l] = ['/a/' + n, '/a/.f-' + n, '/a/.l-' + n];",
    "  try { fs.lstatSync(f); } catch { fs.writeFileSync(f, 'x'); }",
    '  try { fs.lstatSync(l); } catch { fs.symlinkSync(target, l); }',
    '  for (let i = 0; i < 50; i++) { mv(f, p); mv(p, f); mv(l, p); mv(p, l); }',
    '}',
  ].join(' ');
}

type DockerEnv = NonNullable<Awaited<ReturnType<typeof dockerTest>>>;

/**
 * The stage of a network-file race: an image of a listed registry built with `dockerfileRun`, the
 * socket proxy, a host file `hostFileName` under /run that nothing may be mounted over, and a
 * volume `volumeKey` shared by a running racer that swaps dockerd's network files there for
 * symlinks to that host file.
 */
async function networkFileRace(t: Test, env: DockerEnv, stage: { imageName: string; dockerfileRun: string; hostFileName: string; volumeKey: string }): Promise<{ image: string; call: (req: RawCase) => ReturnType<typeof send>; hostFile: string; volume: string }> {
  const image = `registry.example/capybara-test/${stage.imageName}-${env.runId}:1`;
  builtImage(t, image, `cap-${stage.imageName}-`, `FROM ${TEST_LOCAL_IMAGE}\nRUN ${stage.dockerfileRun}\n`);
  const proxy = await startSocketProxy(t, env, { registries: 'registry.example' });
  const call = (req: RawCase) => send(proxy.socketPath, req);
  const hostDir = `/run/cap-${env.runId}-host`;
  const hostFile = join(hostDir, stage.hostFileName);
  mkdirSync(hostDir, { recursive: true });
  chmodSync(hostDir, 0o700);
  writeFileSync(hostFile, 'the host\'s own\n');
  t.teardown(() => {
    while (mountedAt(hostFile)) execFileSync('umount', ['-l', hostFile]);
    rmSync(hostDir, { recursive: true, force: true });
  });
  const shared = env.name(stage.volumeKey);
  t.equal((await call(json('POST', '/v1.41/volumes/create', { Name: shared, Labels: env.labels }))).status, 201);
  const racer = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('racer')}`, {
      Image: TEST_LOCAL_IMAGE,
      User: '0',
      Cmd: ['/usr/bin/node', '-e', networkFileRacerScript(hostFile, ['resolv.conf', 'hosts', 'hostname'])],
      Labels: env.labels,
      HostConfig: hardened([volume(shared, '/a')]),
    }),
  );
  t.equal(racer.status, 201, 'the racer shares the volume');
  t.equal((await call(json('POST', `/v1.41/containers/${env.name('racer')}/start`))).status, 204);
  return { image, call, hostFile, volume: shared };
}

t.test('a one-volume container that has run receives no archive: dockerd would mount its network files too', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  // A container that has run has /etc/resolv.conf, /etc/hosts and /etc/hostname of dockerd's, and
  // for an archive call dockerd bind-mounts those on the host too, after the volume, resolving
  // each through it when the image's symlinks lead there: with `/workspace -> /etc`, the one
  // volume is mounted over the container's /etc, and a racer sharing it has dockerd bind-mount
  // the container's resolv.conf over a host file of its choice (a review won in 39 archive calls).
  const { image, call, hostFile, volume: shared } = await networkFileRace(t, env, { imageName: 'workspace-etc', dockerfileRun: 'ln -s /etc /workspace', hostFileName: 'resolv.conf', volumeKey: 'w' });
  // The hand-over container's own shape, of the image: then started, as a caller can ask.
  const handover = `${env.name('victim')}.handover`;
  await madeAnyway(t, env, call, handover, { Image: image, Cmd: ['true'], Labels: env.labels, HostConfig: hardened([volume(shared, '/workspace')]) });
  const started = await call(json('POST', `/v1.41/containers/${handover}/start`));
  t.same([started.status, started.headers['x-socket-proxy-deny']], [403, 'route_not_allowed'], 'a hand-over container is never started through the proxy');
  const restarted = await call(json('POST', `/v1.41/containers/${handover}/restart?t=1`));
  t.same([restarted.status, restarted.headers['x-socket-proxy-deny']], [403, 'route_not_allowed'], 'nor restarted');
  // One started all the same (directly on the engine, or before this rule), and one of another name.
  if (started.status !== 204) await startedPastRacer(env.docker.getContainer(handover));
  const other = env.name('other');
  await madeAnyway(t, env, call, other, { Image: image, Cmd: ['true'], Labels: env.labels, HostConfig: hardened([volume(shared, '/workspace')]) });
  const fresh = await call(archiveCall(other, workspaceArchive()));
  t.same([fresh.status, fresh.headers['x-socket-proxy-deny']], [403, 'archive_container_not_handover'], 'a never-started container of another name receives no workspace archive (the proxy would start it)');
  await new Promise((r) => setTimeout(r, 500));
  const archive = workspaceArchive();
  const first = await call(archiveCall(handover, archive));
  t.same([first.status, first.headers['x-socket-proxy-deny']], [403, 'archive_container_started'], 'the archive into the hand-over container that has run is refused');
  for (let i = 0; i < RACE_ATTEMPTS && !mountedAt(hostFile); i++) await call(archiveCall(handover, archive));
  t.notOk(mountedAt(hostFile), `no network file is mounted over the host file ${hostFile}`);
  t.equal(readFileSync(hostFile, 'utf8'), 'the host\'s own\n', 'the host file is as it was');
});

t.test('a registration goes only into an egress container of a listed image: a running one\'s network files are mounted too', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  // A registration goes into a running egress container, whose resolv.conf, hostname and hosts
  // dockerd bind-mounts on the host for the call too. With an image whose registration directory
  // is `-> /etc` (from a listed registry), the volume is mounted over its /etc and a racer sharing
  // it had dockerd mount the container's hosts file over a host file (a review won in 67 calls).
  const { image, call, hostFile, volume: shared } = await networkFileRace(t, env, {
    imageName: 'tenants-etc',
    dockerfileRun: `rm -rf ${TENANTS_DIR} && mkdir -p ${dirname(TENANTS_DIR)} && ln -s /etc ${TENANTS_DIR}`,
    hostFileName: 'hosts',
    volumeKey: 'p',
  });
  const egress = env.name('x-egress');
  // An egress-named container of the registry's image, its one mount the registration volume.
  await madeAnyway(t, env, call, egress, { Image: image, Cmd: ['sleep', '600'], Labels: env.labels, HostConfig: hardened([volume(shared, TENANTS_DIR)]) });
  // Through the proxy, again while runc refuses a path the racer swapped in (startedPastRacer).
  let start = await call(json('POST', `/v1.41/containers/${egress}/start`));
  for (let i = 0; i < 50 && start.status >= 400 && lostToRacer(start.body.toString('utf8')); i++) {
    await new Promise((r) => setTimeout(r, 20));
    start = await call(json('POST', `/v1.41/containers/${egress}/start`));
  }
  t.equal(start.status, 204, 'it runs, as an egress proxy does');
  const archive = registrationArchive('s1', { version: 1, vacant: true }, 1_767_225_600);
  const put = (): RawCase => {
    const path = `/v1.41/containers/${egress}/archive?path=${encodeURIComponent(TENANTS_DIR)}`;
    return {
      method: 'PUT', path, headers: {}, body: null,
      raw: `PUT ${path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nContent-Type: application/x-tar\r\nContent-Length: ${archive.length}\r\n\r\n${archive.toString('latin1')}`,
    };
  };
  const first = await call(put());
  t.same([first.status, first.headers['x-socket-proxy-deny']], [403, `archive_image_not_listed:${image}`], 'the registration is refused for the container\'s image');
  for (let i = 0; i < RACE_ATTEMPTS && !mountedAt(hostFile); i++) await call(put());
  t.notOk(mountedAt(hostFile), `no network file is mounted over the host file ${hostFile}`);
  t.equal(readFileSync(hostFile, 'utf8'), 'the host\'s own\n', 'the host file is as it was');
});

t.test('a volume the image itself declares inside the request\'s volume is refused, so runc never makes its mount point on the host', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE]);
  if (!env) return;
  // An image listed by name that declares a volume (VOLUME /w/p/q, as many stock images do for
  // their data): dockerd makes that anonymous volume at create whatever the request says, and runc
  // mounts it at start, after the request's volume at /w, by path through that volume's content
  // (CVE-2024-45310 in the runc here: os.MkdirAll on a path resolved a moment before). The
  // request's own mounts pass every text rule: one volume, nothing nested in it as written.
  const image = `capybara-test-volume-${env.runId}:1`;
  builtImage(t, image, 'cap-imgvol-', `FROM ${TEST_LOCAL_IMAGE}\nUSER 0\nRUN mkdir -p /w/p/q\nVOLUME /w/p/q\n`);
  const proxy = await startSocketProxy(t, env, { images: [TEST_LOCAL_IMAGE, image] });
  const call = (req: RawCase) => send(proxy.socketPath, req);
  // An empty root-only directory on the host: runc must never create anything in it.
  const hostDir = emptyHostDir(t, `/run/cap-${env.runId}-imgvol`);
  t.equal((await call(json('POST', '/v1.41/volumes/create', { Name: env.name('w'), Labels: env.labels }))).status, 201);
  const victim = await call(
    json('POST', `/v1.41/containers/create?name=${env.name('victim')}`, {
      Image: image, Cmd: ['true'], Labels: env.labels, HostConfig: hardened([volume(env.name('w'), '/w')]),
    }),
  );
  t.same([victim.status, victim.headers['x-socket-proxy-deny']], [403, 'mount_image_volume:/w/p/q'], 'the victim is refused: its image declares a volume');
  if (victim.status === 201) {
    t.teardown(() => env.docker.getContainer(env.name('victim')).remove({ force: true, v: true }).catch(() => undefined));
    await raceVictim(t, env, call, { volume: env.name('w'), hostDir, swapped: '/a/p' });
  }
  t.same(readdirSync(hostDir), [], 'nothing was created in the host directory');
});
