/**
 * `gc`: removes the orphans `decideOrphans` found, containers first (an egress proxy holds its
 * networks), then networks, then volumes. Just before each removal the sandbox container is
 * looked up again by name, so a sandbox created since the listing keeps its resources; for a
 * half-built sandbox, its `-building` volume instead, so a create that finished since keeps them.
 * Volumes are removed unforced (one still in use stays and is reported), and only while the
 * volume of that name is the one listed: it is removed by name, which a create reuses. A network a shard of the
 * shared egress serves is left by the shard first (its registration vacant, its leg taken off).
 */
import { type DockerEngine, engineStatus } from '../docker/index.js';
import { LABEL_NAME, LABEL_SANDBOX, namesFor } from '../spec/index.js';
import { leaveShard } from '../sandbox/index.js';
import { readInventory } from './inventory.js';
import { decideOrphans, type ResourceDecision } from './orphans.js';

export interface GcResult {
  readonly kind: ResourceDecision['kind'];
  readonly name: string;
  readonly sandbox: string | undefined;
  readonly ageSeconds: number;
  readonly action: 'would_remove' | 'removed' | 'kept_sandbox_reappeared' | 'kept_create_finished' | 'kept_volume_remade' | 'failed';
  /** Its sandbox was left half-built by a create that never finished (orphans.ts). */
  readonly halfBuilt?: true;
  readonly detail?: string;
}

export interface GcOptions {
  readonly dryRun: boolean;
  readonly minAgeMs: number;
  readonly extraLabels: Readonly<Record<string, string>>;
  readonly nowMs: number;
  /** The deployment's shared network: the shards of its shared egress are named after it. */
  readonly sharedNetwork: string;
}

const ORDER = { container: 0, network: 1, volume: 2 } as const;

/** Removal order: containers, networks, volumes, and a half-built sandbox's marker last of all. */
function rank(d: ResourceDecision): number {
  return d.halfBuilt === true && d.sandbox !== undefined && d.name === namesFor(d.sandbox).buildingVolume ? 3 : ORDER[d.kind];
}

/**
 * Whether the volume of that name is still the one listed. A volume is removed by name, and a
 * create of the same sandbox name makes its volumes again under the same names (its destroy of
 * the stale instance took the old ones) before its container exists to keep them: removed then,
 * dockerd made the volume again for the container by itself, without labels or size.
 */
async function volumeUnchanged(engine: DockerEngine, listed: { readonly name: string; readonly createdMs: number; readonly sandbox: string | undefined }): Promise<boolean> {
  const filters = [`${LABEL_SANDBOX}=1`, ...(listed.sandbox === undefined ? [] : [`${LABEL_NAME}=${listed.sandbox}`])];
  const now = (await engine.listVolumes(filters)).find((v) => v.name === listed.name);
  return now !== undefined && now.createdMs === listed.createdMs;
}

export async function collectGarbage(engine: DockerEngine, options: GcOptions): Promise<GcResult[]> {
  const inventory = await readInventory(engine, options.extraLabels, 'gc');
  const orphans = decideOrphans(inventory, options.nowMs, options.minAgeMs)
    .filter((d) => d.orphan)
    .sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
  const results: GcResult[] = [];
  for (const orphan of orphans) {
    const row = { kind: orphan.kind, name: orphan.name, sandbox: orphan.sandbox, ageSeconds: orphan.ageSeconds, ...(orphan.halfBuilt === true ? { halfBuilt: true as const } : {}) };
    if (options.dryRun) {
      results.push({ ...row, action: 'would_remove' });
      continue;
    }
    if (orphan.halfBuilt === true && orphan.sandbox !== undefined) {
      const building = namesFor(orphan.sandbox).buildingVolume;
      // Its own marker is the last thing removed: looked up for the others only.
      if (orphan.name !== building && (await engine.inspectVolume(building)) === undefined) {
        results.push({ ...row, action: 'kept_create_finished' });
        continue;
      }
    } else if (orphan.sandbox !== undefined && (await engine.inspectContainer(orphan.sandbox)) !== undefined) {
      results.push({ ...row, action: 'kept_sandbox_reappeared' });
      continue;
    }
    const listedVolume = orphan.kind === 'volume' ? inventory.volumes.find((v) => v.name === orphan.name) : undefined;
    if (listedVolume !== undefined && !(await volumeUnchanged(engine, { ...listedVolume, sandbox: orphan.sandbox }))) {
      results.push({ ...row, action: 'kept_volume_remade' });
      continue;
    }
    try {
      if (orphan.kind === 'container') await engine.removeContainer(orphan.id);
      else if (orphan.kind === 'network') {
        // A shard's leg first (its registration ended): the network could not go with it on.
        const view = inventory.networks.find((n) => n.id === orphan.id);
        if (view !== undefined) await leaveShard(engine, view, options.sharedNetwork);
        await engine.removeNetwork(orphan.id);
      }
      else await engine.removeVolume(orphan.name);
      results.push({ ...row, action: 'removed' });
    } catch (err) {
      const status = engineStatus(err);
      results.push({ ...row, action: 'failed', detail: status === 409 ? 'still in use' : (err as Error).message });
    }
  }
  return results;
}
