/**
 * Container create bodies: the hardened sandbox container and its egress proxy. Every field
 * here is a security decision; the comments say which attack each one stops. The socket proxy
 * re-checks the dangerous ones, so these bodies stay minimal.
 */
import { EGRESS_ENV, EGRESS_METRICS_PORT, EGRESS_PROXY_PORT, TENANTS_DIR, encodeAllowHosts } from '../../common/index.js';
import { type LogCaps, type SandboxPlan, PIDS_LIMIT, SandboxError, TIERS } from '../spec/index.js';
import type { ContainerView } from './sandbox-engine.js';
import { CA_TMPFS, CA_WRITE_SCRIPT, carriesCa } from './ca-trust.js';

/** Where the workspace volume is mounted: the sandbox user's working directory. */
export const WORKSPACE = '/workspace';
/** A root-only (0700) tmpfs: only root, the controller's file operations, may enter it. */
const ROOT_ONLY_DIR = '/opt/capybara';
/** Where the skills volume is writable, under the root-only directory. */
export const SKILLS_WRITABLE_ROOT = `${ROOT_ONLY_DIR}/skills`;
/**
 * The sandbox's main process, as root: it closes the root-only directory again, then idles. runc
 * gives a tmpfs the mode of the directory it is mounted on when that directory exists already,
 * and from the second start on it does (runc made it in the first; dockerd makes it even before
 * the first when the workspace archive is put in before it, as on a rebuild, since it mounts the
 * volumes to put it in): so `mode=0700` alone held only until the first restart.
 */
const IDLE_COMMAND = ['sh', '-c', `chmod 0700 ${ROOT_ONLY_DIR} && exec sleep infinity`];
/** The same, first writing the deployment CA's files (ca-trust.ts), for a sandbox with inspected hosts. */
const IDLE_WITH_CA = ['sh', '-c', `chmod 0700 ${ROOT_ONLY_DIR} && ${CA_WRITE_SCRIPT} && exec sleep infinity`];
const LABEL_ROLE = 'dev.capybara.sandbox.role';

const EGRESS_MEMORY_BYTES = 256 * 1024 * 1024;
const EGRESS_PIDS_LIMIT = 256;

interface MountBody {
  Type: 'volume';
  Source: string;
  Target: string;
  ReadOnly?: true;
  VolumeOptions: { NoCopy: true };
}

/**
 * A volume mount. Always NoCopy: without it dockerd copies the image's content at the target into
 * an empty volume, as root, following any symlink that a container sharing the volume planted
 * there meanwhile, which writes into the host (the socket proxy requires it; SECURITY.md, section
 * 2). The workspace volume is handed to the sandbox user instead (workspace-owner.ts).
 */
function volumeMount(source: string, target: string, readOnly = false): MountBody {
  return { Type: 'volume', Source: source, Target: target, ...(readOnly ? { ReadOnly: true as const } : {}), VolumeOptions: { NoCopy: true } };
}

export interface ContainerCreateBody {
  Image: string;
  User?: string;
  Entrypoint?: string[];
  Cmd?: string[];
  WorkingDir?: string;
  Env: string[];
  Labels: Record<string, string>;
  Healthcheck?: { Test: ['NONE'] };
  HostConfig: Record<string, unknown> & { NetworkMode: string };
}

/**
 * The network a sandbox joins, by id (`network`: its internal network's, or the shared one's for
 * a tier on the shared network): a name can stand for several networks after a CheckDuplicate race.
 */
function sandboxNetworkMode(plan: Pick<SandboxPlan, 'tier'>, network: string | undefined): string {
  if (TIERS[plan.tier].sandboxNetwork === 'none') return 'none';
  if (network === undefined) throw new SandboxError('engine_error', `A ${plan.tier} sandbox needs its network's id before its container is created.`);
  return network;
}

/**
 * json-file rotated at the deployment's caps: a sandbox that floods its egress proxy's log (about
 * 3 GB an hour uncapped) fills at most logMaxSizeMb x logMaxFiles. Set explicitly, whatever the
 * engine's default driver is; the socket proxy refuses other drivers and larger caps.
 */
function logConfig(caps: LogCaps): { Type: 'json-file'; Config: Record<string, string> } {
  return { Type: 'json-file', Config: { 'max-size': `${caps.logMaxSizeMb}m`, 'max-file': String(caps.logMaxFiles) } };
}

function envList(env: Readonly<Record<string, string>>): string[] {
  return Object.entries(env).map(([key, value]) => `${key}=${value}`);
}

/**
 * The sandbox's name server: its egress proxy's fixed address, on a tier with a proxy that has
 * one (transparent mode). Docker keeps `nameserver 127.0.0.11` in the container: its embedded DNS
 * answers the names of containers on the network (the proxy's) and forwards every other query to
 * this address from the sandbox's own network namespace, where only the proxy is reachable.
 * Without it (tiers `none` and `internal`) those queries go to the host's resolvers, which the
 * sandbox has no route to: no name resolves.
 */
function nameServer(dns: string | undefined): { Dns?: string[] } {
  return dns === undefined ? {} : { Dns: [dns] };
}

/**
 * `network`: the id of the network the tier attaches the sandbox to (none for tier `none`);
 * `egressAddress`: the egress proxy's fixed address on it, its name server (ignored on a tier
 * without a proxy: no other tier may resolve names).
 */
export function sandboxContainerBody(plan: SandboxPlan, network: string | undefined, egressAddress?: string): ContainerCreateBody {
  const mounts: MountBody[] = [
    volumeMount(plan.workspaceVolume, WORKSPACE),
    // Agents read skills but must not rewrite them for later runs.
    volumeMount(plan.names.skillsVolume, '/skills', true),
    // The controller writes skills here as root; /opt/capybara is a 0700 root tmpfs, so the
    // sandbox user can neither enter it nor reach it through a symlink.
    volumeMount(plan.names.skillsVolume, SKILLS_WRITABLE_ROOT),
  ];
  return {
    Image: plan.image,
    // tini and `sleep infinity` run as root so the sandbox user (uid 1000, every exec) cannot
    // signal them: `kill -9 -1` inside the sandbox does not stop the container.
    User: '0:0',
    // An image entrypoint would run as root in place of the idle process; clear it.
    Entrypoint: [''],
    Cmd: plan.credentials === undefined ? IDLE_COMMAND : IDLE_WITH_CA,
    WorkingDir: WORKSPACE,
    Env: envList(plan.env),
    Labels: { ...plan.containerLabels },
    HostConfig: {
      NetworkMode: sandboxNetworkMode(plan, network),
      ...nameServer(TIERS[plan.tier].egressProxy ? egressAddress : undefined),
      // tini as PID 1 reaps orphans, so killed sessions do not pile up zombies.
      Init: true,
      ...hardened(PIDS_LIMIT, plan.limits.nanoCpus, plan.limits.memoryBytes),
      Tmpfs: {
        // tmpfs counts against the memory cap; nosuid/nodev so no device or setuid file works.
        '/tmp': `rw,exec,nosuid,nodev,size=${plan.limits.tmpBytes},mode=1777`,
        [ROOT_ONLY_DIR]: 'rw,noexec,nosuid,nodev,size=65536,mode=0700',
        // HOME off a persistent workspace: empty at every start, sticky and open to all like /tmp
        // (the socket proxy allows no uid= option). Docker gives it the mode of the image's own
        // directory there when it has one (the sandbox image's is 1777 too).
        ...(plan.home === undefined ? {} : { [plan.home]: `rw,exec,nosuid,nodev,size=${plan.limits.tmpBytes},mode=1777` }),
        ...(plan.credentials === undefined ? {} : CA_TMPFS),
      },
      Mounts: mounts,
      Runtime: plan.runtime,
      RestartPolicy: { Name: 'no' },
      LogConfig: logConfig(plan.logCaps),
    },
  };
}

/**
 * The hardening every container the controller creates shares, whatever its role (a sandbox, an
 * egress proxy, a hand-over container), with its own caps: the socket proxy pins each of these.
 */
function hardened(pidsLimit: number, nanoCpus: number, memoryBytes: number) {
  return {
    // Root in the container holds no capabilities: no raw sockets, no chown, no mounts.
    CapDrop: ['ALL'],
    // setuid binaries in the image cannot raise privileges.
    SecurityOpt: ['no-new-privileges'],
    // Nothing persists outside the volumes and tmpfs mounts; binaries cannot be replaced.
    ReadonlyRootfs: true,
    // A fork bomb stops at this count instead of exhausting the host.
    PidsLimit: pidsLimit,
    IpcMode: 'private',
    // On cgroup v1 Docker 20.10 otherwise shares the host's cgroup namespace, so the container
    // would see the host's cgroup tree (and every other container's path in it).
    CgroupnsMode: 'private',
    NanoCpus: nanoCpus,
    Memory: memoryBytes,
    // Equal to Memory: no swap, so the memory cap is real.
    MemorySwap: memoryBytes,
  };
}

/** What a hand-over container may hold: it is never started, so any small cap serves. */
const HANDOVER_MEMORY_BYTES = 16 * 1024 * 1024;
const HANDOVER_PIDS_LIMIT = 8;

/**
 * The container the workspace is handed over through (sandbox/workspace-handover.ts): never
 * started, with the workspace volume as its one mount point and no network, so that the archive
 * put into it makes dockerd mount that volume alone (the socket proxy's archive proof admits no
 * other shape). Of the sandbox's own image (with one mount point, the image's symlinks have
 * nothing to nest); hardened as every container is.
 */
export function handoverContainerBody(image: string, workspaceVolume: string, labels: Readonly<Record<string, string>>, caps: LogCaps): ContainerCreateBody {
  return {
    Image: image,
    User: '0:0',
    Entrypoint: [''],
    Cmd: ['true'],
    Env: [],
    Labels: { ...labels, [LABEL_ROLE]: 'handover' },
    Healthcheck: { Test: ['NONE'] },
    HostConfig: {
      NetworkMode: 'none',
      ...hardened(HANDOVER_PIDS_LIMIT, 100_000_000, HANDOVER_MEMORY_BYTES),
      RestartPolicy: { Name: 'no' },
      Mounts: [volumeMount(workspaceVolume, WORKSPACE)],
      LogConfig: logConfig(caps),
    },
  };
}

/**
 * What the egress proxy of sandbox `name` tells a client it refused for a host off the allowlist,
 * instead of the standalone proxy's "add the host name to allowHosts": that allowlist is the
 * controller's. `live`: the proxy reads it from its registration, which `capybara-sandbox allow`
 * changes while the sandbox runs; else it is set when the sandbox is created. Printable ASCII (a
 * sandbox name is), well under the proxy's 300 characters.
 */
export function egressRefusalHint(name: string, live: boolean): string {
  if (live) return `the allowlist is the operator's: "capybara-sandbox allow ${name} HOST" allows a host, "capybara-sandbox logs ${name}" shows the decisions`;
  return `the allowlist of sandbox ${name} is set when it is created: the operator sees its decisions with "capybara-sandbox logs ${name}" and allows a host by creating the sandbox again with --allow HOST`;
}

/** The egress proxy's mode: `report` only for a sandbox made for `run --report` (never flipped on an existing one). */
export type EgressMode = 'enforce' | 'report';

export type EgressPlan = Pick<SandboxPlan, 'names' | 'allowHosts' | 'labels' | 'egressProxyImage' | 'logCaps' | 'egressNanoCpus' | 'credentials'>;

/**
 * The egress proxy of an allowlist sandbox. It is created and started on the shared network
 * (`sharedNetwork`: its id); its leg on the sandbox's internal network is connected after (one
 * endpoint per create on API < 1.44; build-steps.ts says why in that order).
 *
 * `transparentAddress`: the proxy's fixed address on the sandbox's network, where it answers DNS
 * and takes TLS and HTTP from clients with no proxy settings (transparent mode); bound to that
 * address only, so the shared network never sees those listeners. The proxy waits for the
 * address to appear (the leg is connected after the start). None on a network made before the
 * address pool: the explicit proxy alone.
 */
export function egressContainerBody(
  plan: EgressPlan,
  sharedNetwork: string,
  testHosts: Readonly<Record<string, string>> | undefined,
  transparentAddress?: string,
  mode: EgressMode = 'enforce',
  policyVolume?: string,
): ContainerCreateBody {
  if (policyVolume !== undefined && plan.credentials !== undefined) throw new SandboxError('invalid_spec', 'An egress proxy with secrets or inspected hosts takes its policy from its environment, not a registration.');
  const env: Record<string, string> = {
    // A registration in the policy volume (the controller writes it once the proxy runs, before
    // its leg on the sandbox's network, and again on every live change); with inspected hosts or
    // secrets, EGRESS_POLICY_JSON (credentials.egressEnv); else the allowlist itself. Never two.
    ...(policyVolume !== undefined
      ? { [EGRESS_ENV.tenantsDir]: TENANTS_DIR }
      : plan.credentials === undefined
        ? { [EGRESS_ENV.allowHosts]: encodeAllowHosts(plan.allowHosts) }
        : plan.credentials.egressEnv),
    // Report mode (run --report only): what only the allowlist refuses passes, logged would_deny
    // (for a registration, its own policy's mode).
    ...(mode === 'report' && policyVolume === undefined ? { [EGRESS_ENV.mode]: 'report' } : {}),
    [EGRESS_ENV.listen]: `0.0.0.0:${EGRESS_PROXY_PORT}`,
    ...(transparentAddress === undefined ? {} : { [EGRESS_ENV.transparentListen]: transparentAddress }),
    // Loopback of the proxy's own container: read by the controller (egressUsage), not by the sandbox.
    [EGRESS_ENV.metricsListen]: `127.0.0.1:${EGRESS_METRICS_PORT}`,
    [EGRESS_ENV.refusalHint]: egressRefusalHint(plan.names.name, policyVolume !== undefined),
  };
  // Checked as printable ASCII where they entered the controller (the provider's test options).
  if (testHosts !== undefined && Object.keys(testHosts).length > 0) {
    env[EGRESS_ENV.testHosts] = JSON.stringify(testHosts);
  }
  return {
    // No User: the image's own non-root user runs the proxy.
    Image: plan.egressProxyImage,
    Env: envList(env),
    Labels: { ...plan.labels, [LABEL_ROLE]: 'egress' },
    // The image's HEALTHCHECK starts a node process every 10 s: per sandbox, on a host of hundreds
    // of sandboxes, a core's worth of checks whose result nothing reads (the controller checks its
    // proxy itself before a command; on-failure restarts a dead one).
    Healthcheck: { Test: ['NONE'] },
    HostConfig: egressHostConfig(sharedNetwork, plan.egressNanoCpus, EGRESS_MEMORY_BYTES, plan.logCaps, policyVolume),
  };
}

/**
 * The hardening of an egress proxy's container, its own or a shard of the shared egress: on the
 * shared network, no capability, read-only root, no forwarding between its legs, restarted when
 * its process dies. `volume`: its registrations directory.
 */
export function egressHostConfig(sharedNetwork: string, nanoCpus: number, memoryBytes: number, caps: LogCaps, volume: string | undefined): ContainerCreateBody['HostConfig'] {
  return {
    NetworkMode: sharedNetwork,
    ...hardened(EGRESS_PIDS_LIMIT, nanoCpus, memoryBytes),
    // The proxy joins two networks or more: it must never route a packet from one to another (a
    // namespace inherits forwarding on from the host's). Only the sandbox's missing NET_ADMIN
    // and NET_RAW kept it from sending one through otherwise.
    Sysctls: { 'net.ipv4.ip_forward': '0' },
    Init: true,
    // A proxy whose process dies (the OOM killer, a crash) comes back at once: without it the
    // sandbox has no way out. Not `always`: a stop (suspend) or a kill stays stopped, and the
    // controller starts it again before the sandbox's next command.
    RestartPolicy: { Name: 'on-failure' },
    LogConfig: logConfig(caps),
    // The registrations directory: a volume, so a restart keeps the current allowlists, and the
    // one place dockerd may write into a container whose root is read-only.
    ...(volume === undefined ? {} : { Mounts: [{ Type: 'volume', Source: volume, Target: TENANTS_DIR, VolumeOptions: { NoCopy: true } }] }),
  };
}

/**
 * The HostConfig keys `sandboxContainerBody` sets that a rebuilt container copies from its
 * inspect data. `NetworkMode` is the network's id now; `CgroupnsMode` and `LogConfig` are not
 * copied but set again: a container created before the controller set them records the engine's
 * defaults (`host` on cgroup v1, an uncapped log), which the socket proxy refuses.
 */
const SANDBOX_HOST_KEYS = [
  'Init', 'CapDrop', 'SecurityOpt', 'ReadonlyRootfs', 'PidsLimit', 'IpcMode',
  'NanoCpus', 'Memory', 'MemorySwap', 'Tmpfs', 'Runtime', 'RestartPolicy',
] as const;

/** What a rebuild reads of the old container's inspect data. */
type InspectedContainer = Pick<ContainerView, 'image' | 'user' | 'workingDir' | 'env' | 'labels' | 'hostConfig'>;

/**
 * The create body of a sandbox container rebuilt from its own inspect data, on `network` (the
 * id of its network now). Needed when its internal network was removed: Docker binds a container
 * to a network by id, so a network recreated under the same name is not found by the old container.
 * `egressAddress`: its egress proxy's fixed address on that network (its name server), for an
 * allowlist sandbox on a network from the address pool.
 */
export function sandboxBodyFromInspect(view: InspectedContainer, caps: LogCaps, network: string, egressAddress?: string): ContainerCreateBody {
  const copied: Record<string, unknown> = {};
  for (const key of SANDBOX_HOST_KEYS) {
    if (view.hostConfig[key] !== undefined && view.hostConfig[key] !== null) copied[key] = view.hostConfig[key];
  }
  const hostConfig: Record<string, unknown> & { NetworkMode: string } = {
    ...copied,
    NetworkMode: network,
    // Not copied: a rebuilt network has another subnet, so its proxy another address.
    ...nameServer(egressAddress),
    CgroupnsMode: 'private',
    LogConfig: logConfig(caps),
  };
  const mounts = Array.isArray(view.hostConfig.Mounts) ? (view.hostConfig.Mounts as Record<string, unknown>[]) : [];
  // NoCopy is set again whatever the old container had (one made before it was).
  hostConfig.Mounts = mounts.map((m) => volumeMount(String(m.Source), String(m.Target), m.ReadOnly === true));
  return {
    Image: view.image,
    User: view.user,
    Entrypoint: [''],
    // The controller's own idle process, never the old container's (one made before it was this).
    Cmd: carriesCa(view.env) ? IDLE_WITH_CA : IDLE_COMMAND,
    WorkingDir: view.workingDir,
    Env: [...view.env],
    Labels: { ...view.labels },
    HostConfig: hostConfig,
  };
}
