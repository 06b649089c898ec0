/**
 * `up` and `down`: the socket proxy container for a controller on the engine host, run through
 * the engine itself (it mounts the engine socket, which no call through the proxy may do). This
 * file is the operator's only direct line to dockerode; what it sends is built and checked in
 * socket-proxy-spec.ts. Nothing half-made is left: a proxy that does not answer in time is
 * removed again, with its log in the error.
 */
import http from 'node:http';
import { existsSync, lstatSync, mkdirSync, realpathSync, rmdirSync, readdirSync, rmSync, statSync, type Stats } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import Docker from 'dockerode';
import { SandboxError, LABEL_NAME } from '../spec/index.js';
import { PROXY_SOCKET_FILE } from './operator-config.js';
import {
  LABEL_OPERATOR,
  OPERATOR_ROLE,
  socketDirOfBinds,
  socketDirProblem,
  socketPathProblem,
  socketProxyBody,
  socketProxyDrift,
  type PathFacts,
  type SocketProxySettings,
} from './socket-proxy-spec.js';

const READY_TIMEOUT_MS = 15_000;
const PING_TIMEOUT_MS = 2_000;

export type Progress = (line: string) => void;

export interface UpResult {
  readonly endpoint: string;
  readonly container: string;
  /** `reused` a running, matching one; `started` a stopped one; `created` or `recreated` it. */
  readonly action: 'reused' | 'started' | 'created' | 'recreated';
  readonly images: readonly string[];
  readonly ms: number;
}

export interface DownResult {
  readonly container: string;
  readonly action: 'removed' | 'absent';
  readonly socketDir: string;
  /** Sandbox containers still on the engine; they keep running without the proxy. */
  readonly sandboxes: readonly string[];
}

function engineClient(engineSocket: string): Docker {
  return new Docker({ socketPath: engineSocket, timeout: 30_000 });
}

function statusOf(err: unknown): number | undefined {
  return (err as { statusCode?: number } | null)?.statusCode;
}

async function requireEngine(docker: Docker, engineSocket: string): Promise<void> {
  try {
    await docker.ping();
  } catch (err) {
    throw new SandboxError('engine_unavailable', `No Docker engine answers on ${engineSocket} (${(err as Error).message}); start it (bash scripts/docker-up.sh) or pass --endpoint unix:///path/to/docker.sock.`, { cause: err });
  }
}

/** GET /_ping on a unix socket: 200 means the proxy (and the engine behind it) answers. */
export function proxyAnswers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.request({ socketPath, path: '/_ping', method: 'GET', timeout: PING_TIMEOUT_MS }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.end();
  });
}

function facts(path: string, st: Stats): PathFacts {
  return { path, isDirectory: st.isDirectory(), isSymbolicLink: st.isSymbolicLink(), uid: st.uid, mode: st.mode };
}

/** Every existing directory from `dir` up to "/": as written (lstat), then as resolved (stat). */
function ancestry(dir: string): PathFacts[] {
  const chain: PathFacts[] = [];
  let existing: string | undefined;
  for (let p = resolve(dir); ; p = dirname(p)) {
    try {
      chain.push(facts(p, lstatSync(p)));
      existing ??= p;
    } catch {
      // Not there yet (up creates it): what is above it is what matters.
    }
    if (p === dirname(p)) break;
  }
  if (existing !== undefined) {
    for (let p = realpathSync(existing); ; p = dirname(p)) {
      chain.push(facts(p, statSync(p)));
      if (p === dirname(p)) break;
    }
  }
  return chain;
}

/**
 * Refuses to use the socket of up when anyone but root could replace the directory it is in:
 * checked by every command that talks to that socket or manages it, not only by up (the
 * directory can be swapped after up made it).
 */
export function requirePrivateSocketPath(dir: string): void {
  const problem = socketPathProblem(ancestry(dir));
  if (problem !== undefined) {
    throw new SandboxError('invalid_config', `The socket directory ${dir} is not safe: ${problem}. Every directory above the socket must be root's and writable by no one else; choose another with --socket-dir.`);
  }
}

/** Creates the socket directory root-only, or checks an existing one is; true when created. */
function prepareSocketDir(dir: string): boolean {
  if (process.getuid?.() !== 0) {
    throw new SandboxError('invalid_config', `up must run as root: the socket proxy's socket goes in ${dir}, a directory only root may open.`);
  }
  requirePrivateSocketPath(dir);
  const created = !existsSync(dir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  const problem = socketDirProblem(dir, facts(dir, st));
  if (problem !== undefined) throw new SandboxError('invalid_config', `The socket directory is not private to root: ${problem}; or choose another with --socket-dir.`);
  requirePrivateSocketPath(dir);
  return created;
}

/** Removes a directory up made, when nothing is in it (the proxy never answered). */
function removeIfEmpty(dir: string): void {
  try {
    if (readdirSync(dir).length === 0) rmdirSync(dir);
  } catch {
    // Gone already, or not ours to read: nothing to tidy.
  }
}

/** Docker's log stream without a TTY: 8-byte frame headers before each chunk. */
function logText(buf: Buffer): string {
  const parts: Buffer[] = [];
  let at = 0;
  while (at + 8 <= buf.length) {
    const size = buf.readUInt32BE(at + 4);
    parts.push(buf.subarray(at + 8, at + 8 + size));
    at += 8 + size;
  }
  return Buffer.concat(parts).toString('utf8').trim().split('\n').slice(-20).join('\n');
}

async function waitUntilAnswering(socketPath: string): Promise<boolean> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (await proxyAnswers(socketPath)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

async function missingImages(docker: Docker, images: readonly string[]): Promise<string[]> {
  const missing: string[] = [];
  for (const image of images) {
    try {
      await docker.getImage(image).inspect();
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
      missing.push(image);
    }
  }
  return missing;
}

export async function socketProxyUp(s: SocketProxySettings, images: readonly string[], progress: Progress): Promise<UpResult> {
  const started = Date.now();
  const docker = engineClient(s.engineSocket);
  await requireEngine(docker, s.engineSocket);
  const allImages = [...new Set([s.image, ...images])];
  const missing = await missingImages(docker, allImages);
  if (missing.length > 0) {
    throw new SandboxError('image_unavailable', `Missing on the engine: ${missing.join(', ')}. Build them first: bash scripts/build-images.sh (offline, a few minutes the first time).`);
  }
  const dirCreated = prepareSocketDir(s.socketDir);
  const socketPath = join(s.socketDir, PROXY_SOCKET_FILE);
  const endpoint = `unix://${socketPath}`;
  const imageId = (await docker.getImage(s.image).inspect()).Id;
  const container = docker.getContainer(s.name);
  const info = await container.inspect().catch((err: unknown) => {
    if (statusOf(err) === 404) return undefined;
    throw err;
  });

  let action: UpResult['action'] = 'created';
  if (info !== undefined) {
    if (info.Config.Labels?.[LABEL_OPERATOR] !== OPERATOR_ROLE) {
      throw new SandboxError('invalid_config', `A container named ${s.name} exists and was not started by capybara-sandbox up; remove it or choose another name with --proxy-name.`);
    }
    const drift = socketProxyDrift({ imageId: info.Image, env: info.Config.Env ?? [], binds: info.HostConfig.Binds ?? [], labels: info.Config.Labels ?? {}, memory: info.HostConfig.Memory ?? 0 }, s, imageId);
    if (drift.length > 0) {
      progress(`socket proxy ${s.name}: recreating (${drift.join('; ')})`);
      await container.remove({ force: true });
      action = 'recreated';
    } else if (info.State.Running && !info.State.Paused && (await proxyAnswers(socketPath))) {
      return { endpoint, container: s.name, action: 'reused', images: allImages, ms: Date.now() - started };
    } else {
      progress(`socket proxy ${s.name}: starting the existing container`);
      if (info.State.Paused) await container.unpause();
      if (!info.State.Running) await container.start();
      if (await waitUntilAnswering(socketPath)) return { endpoint, container: s.name, action: 'started', images: allImages, ms: Date.now() - started };
      progress(`socket proxy ${s.name}: it does not answer; recreating it`);
      await container.remove({ force: true });
      action = 'recreated';
    }
  }
  if (action === 'created') progress(`socket proxy ${s.name}: creating (${s.image}, socket ${socketPath})`);
  try {
    await docker.createContainer({ name: s.name, ...socketProxyBody(s) } as Docker.ContainerCreateOptions);
  } catch (err) {
    if (dirCreated) removeIfEmpty(s.socketDir);
    throw err;
  }
  const created = docker.getContainer(s.name);
  try {
    await created.start();
    if (!(await waitUntilAnswering(socketPath))) {
      const logs = logText(await created.logs({ stdout: true, stderr: true }));
      throw new SandboxError('engine_unavailable', `The socket proxy ${s.name} did not answer on ${socketPath} within ${READY_TIMEOUT_MS / 1000} s; its log:\n${logs}`);
    }
  } catch (err) {
    await created.remove({ force: true }).catch(() => undefined);
    if (dirCreated) removeIfEmpty(s.socketDir);
    throw err;
  }
  return { endpoint, container: s.name, action, images: allImages, ms: Date.now() - started };
}

export async function socketProxyDown(engineSocket: string, name: string, defaultSocketDir: string, labelFilters: readonly string[]): Promise<DownResult> {
  const docker = engineClient(engineSocket);
  await requireEngine(docker, engineSocket);
  const container = docker.getContainer(name);
  const info = await container.inspect().catch((err: unknown) => {
    if (statusOf(err) === 404) return undefined;
    throw err;
  });
  let action: DownResult['action'] = 'absent';
  let socketDir = defaultSocketDir;
  if (info !== undefined) {
    if (info.Config.Labels?.[LABEL_OPERATOR] !== OPERATOR_ROLE) {
      throw new SandboxError('invalid_config', `The container ${name} was not started by capybara-sandbox up; down leaves it alone (docker rm -f ${name} removes it).`);
    }
    socketDir = socketDirOfBinds(info.HostConfig.Binds ?? []) ?? defaultSocketDir;
    // Before anything in it is removed: in a directory someone else controls, "the socket" could
    // be anything of root's.
    requirePrivateSocketPath(socketDir);
    await container.remove({ force: true });
    action = 'removed';
  }
  // HAProxy leaves its socket file behind; the directory goes too when nothing else is in it.
  const socketPath = join(socketDir, PROXY_SOCKET_FILE);
  const st = (() => {
    try {
      return lstatSync(socketPath);
    } catch {
      return undefined;
    }
  })();
  if (st?.isSocket() === true) rmSync(socketPath);
  removeIfEmpty(socketDir);
  const sandboxes = await docker.listContainers({ all: true, filters: { label: [...labelFilters] } });
  const names = sandboxes
    .filter((c) => c.Labels[LABEL_NAME] !== undefined && c.Names.includes(`/${c.Labels[LABEL_NAME]}`))
    .map((c) => c.Labels[LABEL_NAME] as string)
    .sort();
  return { container: name, action, socketDir, sandboxes: names };
}
