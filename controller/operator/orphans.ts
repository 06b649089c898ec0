/**
 * Which sandbox resources are orphans. Pure: takes what the engine listed and the time, and
 * returns a decision per resource with a reason code. A resource is an orphan only when all
 * hold: it names a sandbox (dev.capybara.sandbox.name), that sandbox's container does not
 * exist or was left half-built, it is not a persistent workspace, and it is older than the grace
 * period. The grace period is what keeps gc off another controller replica's create in
 * progress, which makes the volumes, network and egress proxy before the sandbox container.
 *
 * A warm network (sandbox/warm-networks.ts) names no sandbox: it is kept while a container was made
 * on it (unless each is of a half-built sandbox: it goes with that sandbox), and while it may still
 * wait in the pool of the process that made it; after STALE_WARM_MS no process hands it out, and
 * it is an orphan.
 *
 * Half-built: a sandbox whose create never finished (its controller was killed), so that its
 * `-building` volume (names.ts buildingVolume) is still there, older than the grace period. Its
 * container, running or not, goes with the rest; nobody holds a handle to it, since the create
 * that made it never returned one.
 */
import type { ContainerSummary, ResourceSummary } from '../docker/index.js';
import { LABEL_NAME, LABEL_WARM, LABEL_WARM_NETWORK, LABEL_WORKSPACE_KEY, namesFor } from '../spec/index.js';
import { STALE_WARM_MS } from '../sandbox/index.js';
import { isSandboxContainer, type Inventory } from './inventory.js';

export const KEEP_REASONS = {
  sandbox_container: 'It is a sandbox container itself (a stopped one can still be resumed).',
  sandbox_exists: 'Its sandbox container exists.',
  persistent_workspace: 'A persistent workspace (cap-ws.*) is only removed by destroyWorkspace.',
  no_sandbox_name: 'It names no sandbox (for example the shared network).',
  warm_network_in_use: 'A warm network a sandbox container was made on.',
  warm_network_waiting: 'A warm network that may still wait for a create in the controller process that made it (for 30 minutes).',
  too_young: 'Younger than --min-age: a create may still be in progress.',
  age_unknown: 'The engine did not report when it was created.',
} as const;
export type KeepReason = keyof typeof KEEP_REASONS;

export type ResourceKind = 'container' | 'network' | 'volume';

export interface ResourceDecision {
  readonly kind: ResourceKind;
  /** Id for containers and networks (removal by id cannot hit a same-named newer one). */
  readonly id: string;
  readonly name: string;
  readonly sandbox: string | undefined;
  readonly ageSeconds: number;
  readonly orphan: boolean;
  readonly keep?: KeepReason;
  /** Set when the sandbox was left half-built (its container is an orphan too). */
  readonly halfBuilt?: boolean;
}

function decide(
  kind: ResourceKind,
  resource: ContainerSummary | ResourceSummary,
  liveSandboxes: ReadonlySet<string>,
  halfBuilt: ReadonlySet<string>,
  warmInUse: ReadonlyMap<string, string | undefined>,
  nowMs: number,
  minAgeMs: number,
): ResourceDecision {
  const sandbox = resource.labels[LABEL_NAME];
  const ageMs = resource.createdMs > 0 ? nowMs - resource.createdMs : -1;
  const base = { kind, id: resource.id, name: resource.name, sandbox, ageSeconds: Math.max(0, Math.round(ageMs / 1000)) };
  const keep = (reason: KeepReason): ResourceDecision => ({ ...base, orphan: false, keep: reason });
  const persistent = kind === 'volume' && (resource.labels[LABEL_WORKSPACE_KEY] !== undefined || resource.name.startsWith('cap-ws.'));
  if (sandbox !== undefined && halfBuilt.has(sandbox)) return persistent ? keep('persistent_workspace') : { ...base, orphan: true, halfBuilt: true };
  if (kind === 'container' && isSandboxContainer(resource as ContainerSummary)) return keep('sandbox_container');
  if (persistent) return keep('persistent_workspace');
  if (kind === 'network' && sandbox === undefined && resource.labels[LABEL_WARM] !== undefined) {
    if (warmInUse.has(resource.name)) {
      // Every container on it half-built: it goes with them, under their marker's check (gc.ts).
      const half = warmInUse.get(resource.name);
      return half === undefined ? keep('warm_network_in_use') : { ...base, sandbox: half, orphan: true, halfBuilt: true };
    }
    if (ageMs < 0) return keep('age_unknown');
    if (ageMs < Math.max(minAgeMs, STALE_WARM_MS)) return keep('warm_network_waiting');
    return { ...base, orphan: true };
  }
  if (sandbox === undefined || sandbox === '') return keep('no_sandbox_name');
  if (liveSandboxes.has(sandbox)) return keep('sandbox_exists');
  if (ageMs < 0) return keep('age_unknown');
  if (ageMs < minAgeMs) return keep('too_young');
  return { ...base, orphan: true };
}

/**
 * The sandboxes whose create never finished: a `-building` volume of theirs, labelled with their
 * name, older than the grace period.
 */
function halfBuiltSandboxes(inventory: Inventory, nowMs: number, minAgeMs: number): Set<string> {
  const out = new Set<string>();
  for (const v of inventory.volumes) {
    const sandbox = v.labels[LABEL_NAME];
    if (sandbox === undefined || v.name !== namesFor(sandbox).buildingVolume) continue;
    if (v.createdMs > 0 && nowMs - v.createdMs >= minAgeMs) out.add(sandbox);
  }
  return out;
}

/**
 * The warm networks a container was made on, each with the half-built sandbox that is its only
 * user, if so (undefined: some container on it is not one). A network kept for a half-built
 * sandbox's container, which this gc removes, outlived it with its shard's leg, the sandbox's
 * registration and a subnet of the pool until another gc.
 */
function warmNetworksInUse(inventory: Inventory, halfBuilt: ReadonlySet<string>): Map<string, string | undefined> {
  const out = new Map<string, string | undefined>();
  for (const c of inventory.allContainers) {
    const network = c.labels[LABEL_WARM_NETWORK];
    if (network === undefined) continue;
    const sandbox = c.labels[LABEL_NAME];
    const half = sandbox !== undefined && halfBuilt.has(sandbox) ? sandbox : undefined;
    out.set(network, out.has(network) && out.get(network) !== half ? undefined : half);
  }
  return out;
}

export function decideOrphans(inventory: Inventory, nowMs: number, minAgeMs: number): ResourceDecision[] {
  const liveSandboxes = new Set(inventory.allContainers.filter(isSandboxContainer).map((c) => c.name));
  const halfBuilt = halfBuiltSandboxes(inventory, nowMs, minAgeMs);
  const warmInUse = warmNetworksInUse(inventory, halfBuilt);
  const decideOne = (kind: ResourceKind) => (r: ContainerSummary | ResourceSummary) => decide(kind, r, liveSandboxes, halfBuilt, warmInUse, nowMs, minAgeMs);
  return [...inventory.containers.map(decideOne('container')), ...inventory.networks.map(decideOne('network')), ...inventory.volumes.map(decideOne('volume'))];
}
