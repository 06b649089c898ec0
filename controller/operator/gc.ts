/**
 * `gc`: removes the orphans `decideOrphans` found, containers first (an egress proxy holds its
 * networks), then networks, then volumes. Just before each removal the sandbox container is
 * looked up again by name, so a sandbox created since the listing keeps its resources.
 * Volumes are removed unforced: one still in use stays and is reported.
 */
import { type DockerEngine, engineStatus } from '../docker/index.js';
import { readInventory } from './inventory.js';
import { decideOrphans, type ResourceDecision } from './orphans.js';

export interface GcResult {
  readonly kind: ResourceDecision['kind'];
  readonly name: string;
  readonly sandbox: string | undefined;
  readonly ageSeconds: number;
  readonly action: 'would_remove' | 'removed' | 'kept_sandbox_reappeared' | 'failed';
  readonly detail?: string;
}

export interface GcOptions {
  readonly dryRun: boolean;
  readonly minAgeMs: number;
  readonly extraLabels: Readonly<Record<string, string>>;
  readonly nowMs: number;
}

const ORDER = { container: 0, network: 1, volume: 2 } as const;

export async function collectGarbage(engine: DockerEngine, options: GcOptions): Promise<GcResult[]> {
  const inventory = await readInventory(engine, options.extraLabels, 'gc');
  const orphans = decideOrphans(inventory, options.nowMs, options.minAgeMs)
    .filter((d) => d.orphan)
    .sort((a, b) => ORDER[a.kind] - ORDER[b.kind] || a.name.localeCompare(b.name));
  const results: GcResult[] = [];
  for (const orphan of orphans) {
    const row = { kind: orphan.kind, name: orphan.name, sandbox: orphan.sandbox, ageSeconds: orphan.ageSeconds };
    if (options.dryRun) {
      results.push({ ...row, action: 'would_remove' });
      continue;
    }
    if (orphan.sandbox !== undefined && (await engine.inspectContainer(orphan.sandbox)) !== undefined) {
      results.push({ ...row, action: 'kept_sandbox_reappeared' });
      continue;
    }
    try {
      if (orphan.kind === 'container') await engine.removeContainer(orphan.id);
      else if (orphan.kind === 'network') await engine.removeNetwork(orphan.id);
      else await engine.removeVolume(orphan.name);
      results.push({ ...row, action: 'removed' });
    } catch (err) {
      const status = engineStatus(err);
      results.push({ ...row, action: 'failed', detail: status === 409 ? 'still in use' : (err as Error).message });
    }
  }
  return results;
}
