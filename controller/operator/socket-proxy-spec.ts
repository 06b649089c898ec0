/**
 * The socket proxy container that `up` runs for a controller on the engine host, as pure data:
 * its create body, the check that an existing container still matches it, and the check of the
 * directory its unix socket lives in. The proxy listens only on that socket (no network at
 * all), so the directory's permissions are what keep everyone but root away from it: whoever
 * can open the socket can nearly drive the engine.
 */
import { SOCKET_PROXY_ENV } from '../../common/index.js';

/** Marks containers `up` made; `down` and `up` never touch a same-named container without it. */
export const LABEL_OPERATOR = 'dev.capybara.operator';
export const OPERATOR_ROLE = 'socket-proxy';
/** Paths inside the proxy container. */
const INNER_SOCKET_DIR = '/run/capybara-proxy';
const INNER_ENGINE_SOCKET = '/var/run/docker.sock';

export interface SocketProxySettings {
  readonly name: string;
  readonly image: string;
  readonly socketDir: string;
  readonly engineSocket: string;
  /** The deployment's shared network, the one non-`cap-` network the proxy admits. */
  readonly sharedNetwork: string;
  /** The deployment's volume plugin (its `volumeDriver`), the one driver besides local the proxy admits. */
  readonly volumeDriver: string | undefined;
  /** The images containers may run (SOCKET_PROXY_IMAGES): the sandbox images and the egress proxy's. */
  readonly images: readonly string[];
  /** The ceilings of PidsLimit, Memory (MiB) and CPUs: the deployment's own (maxLimits). */
  readonly ceilings: { readonly pids: number; readonly memoryMb: number; readonly cpus: number };
  readonly labels: Readonly<Record<string, string>>;
}

function socketProxyEnv(s: SocketProxySettings): string[] {
  return [
    `${SOCKET_PROXY_ENV.bind}=unix@${INNER_SOCKET_DIR}/docker.sock`,
    `${SOCKET_PROXY_ENV.dockerSocket}=${INNER_ENGINE_SOCKET}`,
    `${SOCKET_PROXY_ENV.sharedNetwork}=${s.sharedNetwork}`,
    `${SOCKET_PROXY_ENV.volumeDrivers}=${s.volumeDriver ?? ''}`,
    `${SOCKET_PROXY_ENV.images}=${s.images.join(',')}`,
    // Nothing is pulled from anywhere but as a listed image: the images are local (scripts/build-images.sh).
    `${SOCKET_PROXY_ENV.registries}=`,
    `${SOCKET_PROXY_ENV.maxPids}=${s.ceilings.pids}`,
    `${SOCKET_PROXY_ENV.maxMemory}=${s.ceilings.memoryMb}`,
    `${SOCKET_PROXY_ENV.maxCpus}=${s.ceilings.cpus}`,
  ];
}

function socketProxyBinds(s: SocketProxySettings): string[] {
  return [`${s.engineSocket}:${INNER_ENGINE_SOCKET}`, `${s.socketDir}:${INNER_SOCKET_DIR}`];
}

/** The host directory an existing proxy container serves its socket from, if any. */
export function socketDirOfBinds(binds: readonly string[]): string | undefined {
  const suffix = `:${INNER_SOCKET_DIR}`;
  return binds.find((b) => b.endsWith(suffix))?.slice(0, -suffix.length);
}

function socketProxyLabels(s: SocketProxySettings): Record<string, string> {
  return { ...s.labels, [LABEL_OPERATOR]: OPERATOR_ROLE };
}

/** The create body sent to the engine itself (the proxy cannot be created through a proxy). */
export function socketProxyBody(s: SocketProxySettings): Record<string, unknown> {
  return {
    Image: s.image,
    Env: socketProxyEnv(s),
    Labels: socketProxyLabels(s),
    HostConfig: {
      Binds: socketProxyBinds(s),
      // No network: the only way in is the unix socket in the root-only directory.
      NetworkMode: 'none',
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      ReadonlyRootfs: true,
      PidsLimit: 256,
      Memory: SOCKET_PROXY_MEMORY_BYTES,
      // Comes back with the engine, as the controller expects its endpoint to.
      RestartPolicy: { Name: 'unless-stopped' },
      // HAProxy logs a line per request: capped, like the controller's own containers.
      LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } },
    },
  };
}

/**
 * The socket proxy's memory limit: what haproxy.cfg lets it allocate, maxconn 4,096 connections of
 * two 64 KiB buffers, Lua's 64 MiB, and room for the rest (test/haproxy/memory-budget.test.ts).
 * Less, and load the configuration admits gets it OOM-killed, every exec stream with it.
 */
export const SOCKET_PROXY_MEMORY_BYTES = 768 * 1024 * 1024;

/** What `docker inspect` says about an existing container, as far as the check needs. */
export interface ExistingProxy {
  readonly imageId: string;
  readonly env: readonly string[];
  readonly binds: readonly string[];
  readonly labels: Readonly<Record<string, string>>;
  /** HostConfig.Memory, in bytes (0: no limit). */
  readonly memory: number;
}

/**
 * Why an existing container is not the one `up` would create now (a rebuilt image, another
 * socket directory or shared network); empty when it can be reused.
 */
export function socketProxyDrift(existing: ExistingProxy, s: SocketProxySettings, currentImageId: string): string[] {
  const out: string[] = [];
  if (existing.imageId !== currentImageId) out.push(`${s.image} is not the image the container runs (rebuilt or renamed since)`);
  for (const entry of socketProxyEnv(s)) if (!existing.env.includes(entry)) out.push(`environment lacks ${entry}`);
  const binds = socketProxyBinds(s);
  if (binds.length !== existing.binds.length || binds.some((b) => !existing.binds.includes(b))) {
    out.push(`mounts are ${existing.binds.join(', ')}, not ${binds.join(', ')}`);
  }
  for (const [key, value] of Object.entries(socketProxyLabels(s))) {
    if (existing.labels[key] !== value) out.push(`label ${key} is not ${value}`);
  }
  if (existing.memory !== SOCKET_PROXY_MEMORY_BYTES) out.push(`memory limit is ${existing.memory / 1024 / 1024} MiB, not ${SOCKET_PROXY_MEMORY_BYTES / 1024 / 1024} MiB`);
  return out;
}

export interface DirectoryFacts {
  readonly isDirectory: boolean;
  readonly isSymbolicLink: boolean;
  readonly uid: number;
  readonly mode: number;
}

export interface PathFacts extends DirectoryFacts {
  readonly path: string;
}

/**
 * Why a directory on the way to the socket could be replaced by someone other than root; undefined
 * when none can. sshd's StrictModes rule, for every ancestor of the socket directory as written and
 * as resolved: owned by root and writable by neither group nor others (a sticky bit does not help:
 * whoever may create entries there may create the next path component before root does). A
 * symlink counts by its owner (its own mode means nothing); where it points is in the resolved
 * chain. Otherwise a user who owns, say, the parent renames the socket directory and listens in
 * its place, and root's commands talk to an impostor.
 */
export function socketPathProblem(chain: readonly PathFacts[]): string | undefined {
  for (const c of chain) {
    if (c.uid !== 0) return `${c.path} is owned by uid ${c.uid}, not root (its owner could replace what lies below it)`;
    if (!c.isSymbolicLink && (c.mode & 0o022) !== 0) {
      return `${c.path} has mode ${(c.mode & 0o7777).toString(8).padStart(4, '0')}, writable by ${(c.mode & 0o020) !== 0 ? 'its group' : 'others'} (who could replace what lies below it)`;
    }
  }
  return undefined;
}

/**
 * Why the socket directory is not private to root; undefined when it is. Group or other access
 * of any kind is refused (execute alone is enough to reach a socket whose name is known), and so
 * is a symlink, which could be pointed elsewhere after the check.
 */
export function socketDirProblem(dir: string, facts: DirectoryFacts): string | undefined {
  if (facts.isSymbolicLink) return `${dir} is a symbolic link; use a real directory`;
  if (!facts.isDirectory) return `${dir} exists and is not a directory`;
  if (facts.uid !== 0) return `${dir} is owned by uid ${facts.uid}, not root`;
  const perms = facts.mode & 0o777;
  if ((perms & 0o077) !== 0) return `${dir} has mode ${perms.toString(8).padStart(3, '0')}; only root may open it (chmod 700 ${dir})`;
  return undefined;
}
