/**
 * `down --all`: every sandbox goes, through the provider's own destroy (container, egress proxy,
 * network, ephemeral volumes, in the order the controller removes them), so nothing is left
 * half-removed; then the shards of the shared egress on the deployment's shared network; then the
 * shared network, when the controller made it and nothing else is on it.
 * A sandbox is known by the name label of anything it left (its container, or only an egress
 * proxy, network or volume of a create that died), so leftovers go too. A name label that is no
 * sandbox name (never the controller's: anyone with the engine, or an image's labels, can set it)
 * is left alone and named, and blocks nothing else. Persistent workspaces are never removed here:
 * they hold the user's work and outlive sandboxes by design.
 */
import { type DockerEngine, engineStatus } from '../docker/index.js';
import { LABEL_NAME, LABEL_SHARED_NETWORK, LABEL_WARM, LABEL_WORKSPACE_KEY, checkSandboxName, type SandboxProvider } from '../spec/index.js';
import { leaveShard, shardOfLabels } from '../sandbox/index.js';
import { readInventory } from './inventory.js';
import type { DownResult } from './socket-proxy-service.js';

export interface DownAllResult {
  readonly destroyed: readonly string[];
  readonly failed: ReadonlyArray<{ readonly name: string; readonly error: string }>;
  /** Name labels that are no sandbox's name: what carries them is not the controller's, and stays. */
  readonly leftAlone: readonly string[];
  /** The shared network: removed, absent, or kept (with why). */
  readonly sharedNetwork: { readonly name: string; readonly action: 'removed' | 'absent' | 'kept'; readonly detail?: string };
}

export interface DownAllDeps {
  /** The engine itself (listing is refused by the socket proxy). */
  readonly engine: DockerEngine;
  /** A provider on that engine: its destroyByName is the controller's destroy. */
  readonly provider: SandboxProvider;
  readonly sharedNetwork: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly progress: (line: string) => void;
}

/** The sandboxes named by the labels of what the deployment's listing finds, and the name labels that name none. */
async function sandboxNames(deps: DownAllDeps): Promise<{ names: string[]; leftAlone: string[] }> {
  const inv = await readInventory(deps.engine, deps.labels, 'down --all');
  const names = new Set<string>();
  const add = (labels: Readonly<Record<string, string>>): void => {
    const name = labels[LABEL_NAME];
    if (name !== undefined) names.add(name);
  };
  for (const r of [...inv.containers, ...inv.networks]) add(r.labels);
  // A persistent workspace volume names the sandbox that made it, which may be gone for good: it
  // names no sandbox to destroy (its holder's container, if any, does).
  for (const v of inv.volumes) if (v.labels[LABEL_WORKSPACE_KEY] === undefined) add(v.labels);
  const valid = (name: string): boolean => {
    try {
      return checkSandboxName(name) === name;
    } catch {
      return false;
    }
  };
  const all = [...names].sort();
  return { names: all.filter(valid), leftAlone: all.filter((name) => !valid(name)) };
}

async function removeSharedNetwork(deps: DownAllDeps): Promise<DownAllResult['sharedNetwork']> {
  const name = deps.sharedNetwork;
  const network = await deps.engine.inspectNetwork(name);
  if (network === undefined) return { name, action: 'absent' };
  // Only the network the controller made (and, with --label, one that carries every label).
  const ours = network.labels[LABEL_SHARED_NETWORK] === name && Object.entries(deps.labels).every(([k, v]) => network.labels[k] === v);
  if (!ours) return { name, action: 'kept', detail: `not made by the controller (no ${LABEL_SHARED_NETWORK}=${name} label${Object.keys(deps.labels).length > 0 ? ' or not every --label' : ''})` };
  // The inspect's members are the running containers; a stopped one that names the network would
  // not start again without it.
  const users = [...new Set([...network.members.map((m) => m.name), ...(await deps.engine.containersOnNetwork({ id: network.id, name }))])];
  if (users.length > 0) return { name, action: 'kept', detail: `still used by ${users.join(', ')}` };
  try {
    await deps.engine.removeNetwork(network.id);
  } catch (err) {
    // 409: something joined it since the inspect; it stays, as it should.
    if (engineStatus(err) === 409) return { name, action: 'kept', detail: (err as Error).message };
    throw err;
  }
  return { name, action: 'removed' };
}

/**
 * The shards of the shared egress on this deployment's shared network (`cap-egress.<k>.<network>`),
 * with their registrations volumes: once every sandbox is gone they serve nobody.
 */
async function removeShards(deps: DownAllDeps): Promise<void> {
  const inv = await readInventory(deps.engine, deps.labels, 'down --all');
  const shards = inv.containers.filter((c) => shardOfLabels(c.labels, deps.sharedNetwork)?.name === c.name);
  // The warm networks no sandbox was made on (those of the sandboxes went with them): with the
  // shards gone nothing is on them.
  const warm = inv.networks.filter((n) => n.labels[LABEL_WARM] !== undefined && n.labels[LABEL_NAME] === undefined);
  // A shard carries the labels of the process that made it, not those of every sandbox it serves:
  // with --label, a sandbox (or a warm network) without the label can still be on it, by a leg on
  // its network, and keeps it.
  const going = new Set(warm.flatMap((n) => [n.id, n.name]));
  for (const shard of shards) {
    const legs = shard.networks.filter((n) => n.name !== deps.sharedNetwork && !going.has(n.name) && !(n.id !== '' && going.has(n.id)));
    if (legs.length > 0) {
      deps.progress(`egress shard ${shard.name} kept: it still serves ${legs.map((n) => n.name).join(', ')} (not every --label)`);
      continue;
    }
    await deps.engine.removeContainer(shard.name);
    await deps.engine.removeVolume(shard.name);
    deps.progress(`egress shard ${shard.name} removed`);
  }
  for (const network of warm) {
    // A kept shard is still on it.
    await leaveShard(deps.engine, network, deps.sharedNetwork);
    await deps.engine.removeNetwork(network.id);
  }
  if (warm.length > 0) deps.progress(`${warm.length} warm network(s) removed`);
}

export async function destroyAllSandboxes(deps: DownAllDeps): Promise<DownAllResult> {
  const { names, leftAlone } = await sandboxNames(deps);
  if (leftAlone.length > 0) deps.progress(`left alone, not the controller's (its name label is no sandbox name): ${leftAlone.map((n) => JSON.stringify(n)).join(', ')}`);
  deps.progress(names.length === 0 ? 'no sandboxes to destroy' : `destroying ${names.length} sandbox(es): ${names.join(', ')}`);
  const destroyed: string[] = [];
  const failed: Array<{ name: string; error: string }> = [];
  for (const name of names) {
    try {
      await deps.provider.destroyByName(name);
      destroyed.push(name);
      deps.progress(`${name} destroyed`);
    } catch (err) {
      failed.push({ name, error: (err as Error).message });
      deps.progress(`${name} was not destroyed: ${(err as Error).message}`);
    }
  }
  if (failed.length === 0) await removeShards(deps);
  const sharedNetwork = failed.length === 0
    ? await removeSharedNetwork(deps)
    : { name: deps.sharedNetwork, action: 'kept' as const, detail: 'some sandboxes were not destroyed' };
  return { destroyed, failed, leftAlone, sharedNetwork };
}

/** The human output of `down` (with or without --all). */
export function downLines(proxy: DownResult, all: DownAllResult | undefined): string {
  const lines = [proxy.action === 'removed' ? `socket proxy ${proxy.container} stopped and removed` : `no socket proxy ${proxy.container} was running`];
  if (all !== undefined) {
    lines.push(`${all.destroyed.length} sandbox(es) destroyed${all.destroyed.length === 0 ? '' : `: ${all.destroyed.join(', ')}`}`);
    for (const f of all.failed) lines.push(`${f.name} was NOT destroyed: ${f.error}; run capybara-sandbox down --all again`);
    if (all.leftAlone.length > 0) {
      lines.push(`left alone: what carries the name label ${all.leftAlone.map((n) => JSON.stringify(n)).join(', ')} (no sandbox name, so not the controller's); remove it by hand if it is yours (docker ps -a, docker network ls, docker volume ls, --filter label=dev.capybara.sandbox.name)`);
    }
    const n = all.sharedNetwork;
    lines.push(`shared network ${n.name}: ${n.action === 'absent' ? 'not present' : n.action}${n.detail === undefined ? '' : ` (${n.detail})`}`);
  }
  if (proxy.sandboxes.length > 0) {
    lines.push(`${proxy.sandboxes.length} sandbox(es) remain and keep running: ${proxy.sandboxes.join(', ')}; capybara-sandbox down --all removes them (or destroy NAME, after up)`);
  }
  return `${lines.join('\n')}\n`;
}
