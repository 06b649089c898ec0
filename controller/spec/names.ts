/**
 * Resource names and labels. Every Docker object of a sandbox is named from its conversation
 * id, so the controller can always address it by name (the socket proxy only admits `cap-`
 * names) and clean up by label.
 */
import { SandboxError } from './errors.js';

/** The sandbox user: every command runs as this uid (and gid), the sandbox image's `sandbox`. */
export const SANDBOX_UID = 1000;

export const LABEL_SANDBOX = 'dev.capybara.sandbox';
export const LABEL_NAME = 'dev.capybara.sandbox.name';
/** The allowlist, recorded so `resume` can rebuild a missing egress proxy. */
export const LABEL_ALLOW_HOSTS = 'dev.capybara.sandbox.allow-hosts';
export const LABEL_EGRESS = 'dev.capybara.sandbox.egress';
export const LABEL_WORKSPACE_KEY = 'dev.capybara.sandbox.workspace';
/** On a sandbox network: the subnet it was created with (from the deployment's address pool). */
export const LABEL_SUBNET = 'dev.capybara.sandbox.subnet';
/** On the shared network the controller made: its name, the one label a listing may filter on. */
export const LABEL_SHARED_NETWORK = 'dev.capybara.sandbox.shared-network';
/**
 * On an allowlist sandbox's container: `shared` when a shard of the engine's shared egress serves
 * it (shards.ts); absent, its own proxy `cap-<id>-egress` does.
 */
export const LABEL_EGRESS_ISOLATION = 'dev.capybara.sandbox.egress-isolation';
/** On a shard of the shared egress: its number. */
export const LABEL_EGRESS_SHARD = 'dev.capybara.sandbox.egress-shard';
/**
 * On a warm network (a warm slot, sandbox/warm-networks.ts): the token of the controller process
 * that made it, the only one that hands it to a sandbox.
 */
export const LABEL_WARM = 'dev.capybara.sandbox.warm';
/** On a sandbox container made on a warm network: that network's name, its own from then on. */
export const LABEL_WARM_NETWORK = 'dev.capybara.sandbox.warm-network';

/**
 * A warm network: `cap-warm.<token>.<n>`, made before the sandbox it will serve is known, so
 * named after no sandbox. The dots keep it apart from every sandbox's own names.
 */
const WARM_NETWORK_RE = /^cap-warm\.[0-9a-f]{8}\.[0-9]{1,9}$/;
export function warmNetworkName(token: string, n: number): string {
  const name = `cap-warm.${token}.${n}`;
  if (!WARM_NETWORK_RE.test(name)) throw new SandboxError('engine_error', `No warm network can be named ${JSON.stringify(name)}.`);
  return name;
}
export function isWarmNetworkName(name: string | undefined): name is string {
  return name !== undefined && WARM_NETWORK_RE.test(name);
}

/**
 * The network a sandbox is on: the warm network it was made on (its container's label), else the
 * one named after it.
 */
export function sandboxNetworkName(name: string, containerLabels: Readonly<Record<string, string>>): string {
  const warm = containerLabels[LABEL_WARM_NETWORK];
  return isWarmNetworkName(warm) ? warm : namesFor(name).network;
}

/**
 * The shards of a deployment's shared egress: `cap-egress.<k>.<shared network>`, container and
 * registrations volume alike, so that deployments with shared networks of their own (and test
 * runs) never share a shard. A sandbox id has no ".", so no sandbox's resource is ever named so;
 * the socket proxy admits a registration into exactly these (k below 100, the shared network's
 * name starting "cap") and the sandboxes' own proxies.
 */
export const MAX_EGRESS_SHARDS = 100;
/** What every shard's name starts with. */
export const EGRESS_SHARD_PREFIX = 'cap-egress.';
export function egressShardName(sharedNetwork: string, k: number): string {
  if (!Number.isInteger(k) || k < 0 || k >= MAX_EGRESS_SHARDS) throw new SandboxError('invalid_config', `Egress shard ${k} is outside 0-${MAX_EGRESS_SHARDS - 1}.`);
  return `${EGRESS_SHARD_PREFIX}${k}.${sharedNetwork}`;
}

/**
 * A conversation id becomes part of DNS names (`cap-<id>-egress` is the proxy host the sandbox
 * dials), so it is one DNS label at most 63 octets long once prefixed and suffixed. No dots:
 * that keeps sandbox names disjoint from persistent workspace volumes (`cap-ws.<key>`).
 */
const SANDBOX_ID_RE = /^(?!.*-egress$)[A-Za-z0-9][A-Za-z0-9_-]{0,51}$/;
/**
 * Sandbox resource names: `cap-` plus an id. An id never ends in `-egress`: `cap-<id>-egress` is
 * the egress proxy of id <id>, and a sandbox of that name would be another conversation's proxy.
 */
const SANDBOX_PREFIX = 'cap-';
/** Persistent workspace keys. */
const WORKSPACE_KEY_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/**
 * Exec holder tags; they go into each command's mark (`CAPYBARA_EXEC=<tag>/<uuid>`) and the
 * kill scripts' glob patterns (`<tag>/*`), so only characters without meaning to either.
 */
export const SANDBOX_TAG_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export interface SandboxNames {
  readonly name: string;
  readonly container: string;
  readonly egress: string;
  readonly network: string;
  readonly workspaceVolume: string;
  readonly skillsVolume: string;
  /**
   * An empty volume that exists while a create is unfinished: made before the sandbox container,
   * removed once the sandbox is ready. A sandbox container beside it, older than gc's grace
   * period, was left half-built by a controller that died (operator/orphans.ts).
   */
  readonly buildingVolume: string;
  /**
   * The egress proxy's registrations directory (common/tenant-archive.ts): the sandbox's current
   * allowlist, which `changeAllowHosts` rewrites while the sandbox runs and a restart keeps.
   */
  readonly egressPolicyVolume: string;
  /**
   * A container that exists only while the workspace volume is handed to the sandbox user
   * (sandbox/workspace-handover.ts): never started, the workspace volume its one mount. A dot, so
   * that no sandbox id makes this name.
   */
  readonly handover: string;
}

export function namesFor(name: string): SandboxNames {
  return {
    name,
    container: name,
    egress: `${name}-egress`,
    network: `${name}-net`,
    workspaceVolume: `${name}-workspace`,
    skillsVolume: `${name}-skills`,
    buildingVolume: `${name}-building`,
    egressPolicyVolume: `${name}-egress-policy`,
    handover: `${name}.handover`,
  };
}

export function sandboxNameForId(id: string): string {
  if (typeof id !== 'string' || !SANDBOX_ID_RE.test(id)) {
    throw new SandboxError(
      'invalid_spec',
      `Sandbox id ${JSON.stringify(id)} is not allowed: use 1-52 ASCII letters, digits, "_" or "-", starting with a letter or digit and not ending in "-egress" (the suffix of a sandbox's egress proxy).`,
    );
  }
  return `${SANDBOX_PREFIX}${id}`;
}

export function checkSandboxName(name: string): string {
  if (typeof name !== 'string' || !name.startsWith(SANDBOX_PREFIX) || !SANDBOX_ID_RE.test(name.slice(SANDBOX_PREFIX.length))) {
    throw new SandboxError(
      'invalid_spec',
      `Sandbox name ${JSON.stringify(name)} is not a sandbox resource name: expected "cap-" followed by 1-52 ASCII letters, digits, "_" or "-", not ending in "-egress".`,
    );
  }
  return name;
}

export function persistentWorkspaceVolume(key: string): string {
  if (typeof key !== 'string' || !WORKSPACE_KEY_RE.test(key)) {
    throw new SandboxError(
      'invalid_spec',
      `Workspace key ${JSON.stringify(key)} is not allowed: use 1-128 ASCII letters, digits, "_", "." or "-", starting with a letter or digit.`,
    );
  }
  return `cap-ws.${key}`;
}

export function checkTag(tag: string): string {
  if (typeof tag !== 'string' || !SANDBOX_TAG_RE.test(tag)) {
    throw new SandboxError(
      'invalid_spec',
      `Exec tag ${JSON.stringify(tag)} is not allowed: use 1-64 ASCII letters, digits, "_", "." or "-", starting with a letter or digit.`,
    );
  }
  return tag;
}

/** Labels carried by every resource of one sandbox. */
export function sandboxLabels(name: string, extra: Readonly<Record<string, string>>): Record<string, string> {
  return { ...extra, [LABEL_SANDBOX]: '1', [LABEL_NAME]: name };
}
