/**
 * What the engine holds for sandboxes: every container, network and volume labelled
 * dev.capybara.sandbox=1, and the per-sandbox rows `ls` shows. Listing is refused by the
 * socket proxy on purpose, so a 403 becomes an error that says which endpoint to use instead.
 */
import { type ContainerSummary, type DockerEngine, type ResourceSummary, engineStatus } from '../docker/index.js';
import { EGRESS_SHARD_PREFIX, SandboxError, LABEL_ALLOW_HOSTS, LABEL_EGRESS, LABEL_EGRESS_ISOLATION, LABEL_EGRESS_SHARD, LABEL_NAME, LABEL_SANDBOX, namesFor } from '../spec/index.js';
import { decodeAllowHosts } from '../../common/index.js';
import { shardOfLabels } from '../sandbox/index.js';
import { egressState } from './egress-state.js';

export interface Inventory {
  /** Every sandbox-labelled container (not narrowed by --label: used to tell live sandboxes). */
  readonly allContainers: readonly ContainerSummary[];
  /** Containers, networks and volumes carrying the sandbox label and every --label filter. */
  readonly containers: readonly ContainerSummary[];
  readonly networks: readonly ResourceSummary[];
  readonly volumes: readonly ResourceSummary[];
}

export interface SandboxRow {
  readonly name: string;
  readonly state: string;
  readonly tier: string;
  readonly created: string;
  readonly ageSeconds: number;
  readonly image: string;
  /** running, exited, paused, ..., `detached` (running, off the sandbox's network), `exposed` (the sandbox on another network too), `missing` (a tier with a proxy, without it) or `none`. */
  readonly egress: string;
  readonly allowHosts: readonly string[];
}

export function labelFilters(extra: Readonly<Record<string, string>>): string[] {
  return [`${LABEL_SANDBOX}=1`, ...Object.entries(extra).map(([k, v]) => `${k}=${v}`)];
}

/** `more`: further label filters as Docker takes them (`KEY` or `KEY=VALUE`), e.g. of ls --filter. */
export async function readInventory(engine: DockerEngine, extraLabels: Readonly<Record<string, string>>, command: string, more: readonly string[] = []): Promise<Inventory> {
  const filters = [...labelFilters(extraLabels), ...more];
  try {
    const [allContainers, containers, networks, volumes] = await Promise.all([
      engine.listContainers([`${LABEL_SANDBOX}=1`]),
      engine.listContainers(filters),
      engine.listNetworks(filters),
      engine.listVolumes(filters),
    ]);
    return { allContainers, containers, networks, volumes };
  } catch (err) {
    if (engineStatus(err) === 403) {
      throw new SandboxError(
        'engine_refused',
        `${command} needs to list containers, networks and volumes, which the socket proxy refuses by design. ` +
          'Run it on the engine host against the engine itself: --endpoint unix:///var/run/docker.sock (or a tcp:// engine with --tls-cert-dir).',
        { cause: err },
      );
    }
    throw err;
  }
}

/** A sandbox container is the one whose name equals its own sandbox-name label. */
export function isSandboxContainer(c: ContainerSummary): boolean {
  return c.labels[LABEL_NAME] !== undefined && c.labels[LABEL_NAME] === c.name;
}

/**
 * The shard of the shared egress that serves a sandbox (`egressIsolation: shared`): of the shards
 * of its number (one per deployment's shared network), the one with a leg on the sandbox's
 * network, else the one of `sharedNetwork` (then `detached`, or its state when the sandbox is not
 * running), else none (`missing`). Never another deployment's shard of the same number: its state
 * says nothing of this sandbox's way out.
 */
function shardServing(all: readonly ContainerSummary[], sandbox: ContainerSummary, sharedNetwork: string): ContainerSummary | undefined {
  const shards = all.filter((x) => x.name.startsWith(EGRESS_SHARD_PREFIX) && x.labels[LABEL_EGRESS_SHARD] === sandbox.labels[LABEL_EGRESS_SHARD]);
  const network = sandbox.networks.find((n) => n.id !== '');
  const own = shardOfLabels(sandbox.labels, sharedNetwork)?.name;
  return shards.find((x) => network !== undefined && x.networks.some((n) => n.id === network.id)) ?? shards.find((x) => x.name === own);
}

/** `sharedNetwork`: the deployment's, after which the shards of its shared egress are named. */
export function sandboxRows(inventory: Inventory, nowMs: number, sharedNetwork: string): SandboxRow[] {
  const byName = new Map(inventory.allContainers.map((c) => [c.name, c]));
  return inventory.containers.filter(isSandboxContainer).map((c) => {
    const tier = c.labels[LABEL_EGRESS] ?? 'unknown';
    const proxy = c.labels[LABEL_EGRESS_ISOLATION] === 'shared' ? shardServing(inventory.allContainers, c, sharedNetwork) : byName.get(namesFor(c.name).egress);
    return {
      name: c.name,
      state: c.state,
      tier,
      created: new Date(c.createdMs).toISOString(),
      ageSeconds: Math.max(0, Math.round((nowMs - c.createdMs) / 1000)),
      image: c.image,
      egress: egressState(c, proxy),
      allowHosts: decodeAllowHosts(c.labels[LABEL_ALLOW_HOSTS] ?? ''),
    };
  }).sort((a, b) => a.name.localeCompare(b.name));
}
