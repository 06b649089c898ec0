/**
 * Shared helper for tests that need a real Docker engine.
 *
 * Why: Docker tests must never pass by accident. A missing engine or image is a need (needs.ts):
 * outside CI the test skips with the reason, under CI it fails with it. And everything they create
 * must disappear again, also when a test fails half-way.
 *
 * API (keep it small; the controller tests reuse it):
 *
 *   const env = await dockerTest(t, [images]); // null: the test was skipped or failed (no engine,
 *                                              // or one of the images is missing)
 *   if (!env) return;
 *   env.docker       dockerode client on the engine itself (setup and checks, never the product path)
 *   env.runId        random id of this test file's run, e.g. "t3f9a1c2e"
 *   env.name('x')    "cap-t3f9a1c2e-x": unique name, valid for containers, volumes and networks
 *                    (the socket proxy wants "cap-" for containers/volumes and "cap" for networks)
 *   env.labels       { 'dev.capybara.test': runId }: put it on everything you create
 *   env.cleanup()    removes every container, network and volume carrying the label or the runId
 *                    in its name; already registered with t.teardown, safe to call again
 *
 *   const proxy = await startSocketProxy(t, env, { sharedNetwork, volumeDrivers });   // options optional
 *                     sharedNetwork: SOCKET_PROXY_SHARED_NETWORK (default: the image's, capybara-sandbox)
 *                     volumeDrivers: SOCKET_PROXY_VOLUME_DRIVERS (default: the image's, none)
 *                     images:        SOCKET_PROXY_IMAGES (default: the project's images and the
 *                                    tests' small local one, TEST_LOCAL_IMAGE)
 *                     registries:    SOCKET_PROXY_REGISTRIES (default: the image's, none)
 *                     env:           more of its variables (SOCKET_PROXY_MAX_*)
 *                     binds: more host:container[:ro] mounts (a test's own version of a proxy file)
 *   proxy.socketPath  host path of the proxy's unix socket (talk HTTP to it, or
 *                     new Docker({ socketPath }))
 *   proxy.endpoint    the same as "unix://<path>", the controller's `endpoint` config value
 *   proxy.container   name of the capybara-sandbox-proxy:latest container (removed at teardown)
 *   proxy.logs()      the proxy's log lines (one per request, with the deny reason)
 *
 * The proxy listens on a unix socket in a fresh host directory (SOCKET_PROXY_BIND=unix@...), with
 * the engine socket mounted (DOCKER_SOCKET) and no network at all: nothing is published on any
 * address.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';
import Docker from 'dockerode';
import type { Test } from 'tap';
import { IMAGES, SOCKET_PROXY_ENV } from '../../common/index.js';
import { engineProblem, engineSocketPath, leftOutOfUnitRun, needUnmet } from './needs.js';

export { engineSocketPath };

export const TEST_LABEL = 'dev.capybara.test';
/**
 * CAPYBARA_TEST_PROXY_IMAGE picks another build of the socket proxy, for engineers who share one
 * engine while another of them is rebuilding :latest from a branch with different rules.
 */
export const SOCKET_PROXY_IMAGE = process.env.CAPYBARA_TEST_PROXY_IMAGE ?? IMAGES.proxy;

/** A small local image (trixie with /usr/bin/node) that tests run containers of through the proxy. */
export const TEST_LOCAL_IMAGE = 'capybara-base-egress:latest';
/** What startSocketProxy admits by default: the project's images and TEST_LOCAL_IMAGE. */
export const TEST_PROXY_IMAGES = [IMAGES.sandbox, IMAGES.egress, TEST_LOCAL_IMAGE] as const;

export interface DockerTestEnv {
  docker: Docker;
  runId: string;
  name(suffix: string): string;
  labels: Record<string, string>;
  cleanup(): Promise<void>;
}

export interface SocketProxy {
  socketPath: string;
  endpoint: string;
  container: string;
  logs(): Promise<string>;
}

/**
 * The engine must answer and every image in `images` be on it (needs.ts decides skip or fail);
 * `npm run test:unit` skips the test.
 */
export async function dockerTest(t: Test, images: readonly string[] = []): Promise<DockerTestEnv | null> {
  if (leftOutOfUnitRun(t, 'engine')) return null;
  const problem = await engineProblem();
  if (problem !== undefined) {
    needUnmet(t, problem);
    return null;
  }
  const docker = new Docker({ socketPath: engineSocketPath() });
  for (const image of images) {
    if (!(await docker.getImage(image).inspect().then(() => true, () => false))) {
      needUnmet(t, `image ${image} is missing: run bash scripts/build-images.sh`);
      return null;
    }
  }
  const runId = `t${randomBytes(4).toString('hex')}`;
  const labels = { [TEST_LABEL]: runId };
  const cleanup = () => removeRun(docker, runId);
  t.teardown(cleanup);
  return { docker, runId, name: (suffix) => `cap-${runId}-${suffix}`, labels, cleanup };
}

async function removeRun(docker: Docker, runId: string): Promise<void> {
  const byLabel = { label: [`${TEST_LABEL}=${runId}`] };
  const byName = { name: [runId] };
  const ids = new Set<string>();
  for (const filters of [byLabel, byName]) {
    for (const c of await docker.listContainers({ all: true, filters })) ids.add(c.Id);
  }
  await Promise.all([...ids].map((id) =>
    docker.getContainer(id).remove({ force: true, v: true }).catch(ignoreMissing)));

  const nets = new Set<string>();
  for (const filters of [byLabel, byName]) {
    for (const n of await docker.listNetworks({ filters })) nets.add(n.Id);
  }
  await Promise.all([...nets].map((id) => docker.getNetwork(id).remove().catch(ignoreMissing)));

  const vols = new Set<string>();
  for (const filters of [byLabel, byName]) {
    const { Volumes } = await docker.listVolumes({ filters });
    for (const v of Volumes ?? []) vols.add(v.Name);
  }
  await Promise.all([...vols].map((name) => docker.getVolume(name).remove({ force: true }).catch(ignoreMissing)));
}

function ignoreMissing(err: { statusCode?: number }): void {
  if (err?.statusCode !== 404) throw err;
}

/** Starts capybara-sandbox-proxy:latest for this test, reachable on a host unix socket. */
export async function startSocketProxy(
  t: Test,
  env: DockerTestEnv,
  options: {
    sharedNetwork?: string; volumeDrivers?: string; images?: readonly string[]; registries?: string; env?: Readonly<Record<string, string>>; binds?: readonly string[];
  } = {},
): Promise<SocketProxy> {
  const dir = mkdtempSync(join(tmpdir(), `cap-${env.runId}-proxy-`));
  const socketPath = join(dir, 'docker.sock');
  // Never a cap- name: the socket proxy admits exec into cap- containers, and an exec in a socket
  // proxy is the engine itself (SECURITY.md, section 2).
  const name = `sockproxy-${env.runId}-${randomBytes(2).toString('hex')}`;
  t.teardown(async () => {
    await env.docker.getContainer(name).remove({ force: true }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });
  const container = await env.docker.createContainer({
    _query: { name },
    _body: {
      Image: SOCKET_PROXY_IMAGE,
      Labels: env.labels,
      Env: [
        `${SOCKET_PROXY_ENV.bind}=unix@/run/capybara-proxy/docker.sock`,
        `${SOCKET_PROXY_ENV.dockerSocket}=/var/run/docker.sock`,
        ...(options.sharedNetwork === undefined ? [] : [`${SOCKET_PROXY_ENV.sharedNetwork}=${options.sharedNetwork}`]),
        ...(options.volumeDrivers === undefined ? [] : [`${SOCKET_PROXY_ENV.volumeDrivers}=${options.volumeDrivers}`]),
        `${SOCKET_PROXY_ENV.images}=${(options.images ?? TEST_PROXY_IMAGES).join(',')}`,
        ...(options.registries === undefined ? [] : [`${SOCKET_PROXY_ENV.registries}=${options.registries}`]),
        ...Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`),
      ],
      HostConfig: {
        Binds: [`${engineSocketPath()}:/var/run/docker.sock`, `${dir}:/run/capybara-proxy`, ...(options.binds ?? [])],
        NetworkMode: 'none',
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        ReadonlyRootfs: true,
      },
    },
  } as unknown as Docker.ContainerCreateOptions);
  await container.start();
  const logs = async () => (await container.logs({ stdout: true, stderr: true })).toString('utf8');
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (existsSync(socketPath) && (await pingStatus(socketPath)) === 200) break;
    if (Date.now() > deadline) {
      throw new Error(`socket proxy ${name} did not answer on ${socketPath} within 15s:\n${await logs()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { socketPath, endpoint: `unix://${socketPath}`, container: name, logs };
}

function pingStatus(socketPath: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request({ socketPath, path: '/_ping', method: 'GET', timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => { req.destroy(); resolve(0); });
    req.end();
  });
}
