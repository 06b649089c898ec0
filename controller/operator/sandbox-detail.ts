/**
 * `inspect NAME`: one sandbox as the controller sees it, read with per-name calls only, so it
 * works through the socket proxy too.
 */
import { type ContainerView, type DockerEngine, engineStatus } from '../docker/index.js';
import { SandboxError, LABEL_ALLOW_HOSTS, LABEL_EGRESS, checkSandboxName, meaningOfLabel, namesFor, sandboxNetworkName } from '../spec/index.js';
import { decodeAllowHosts } from '../../common/index.js';
import { egressState } from './egress-state.js';
import { EGRESS_USER, readRegistration, seatOfSandbox, type EgressSeat } from '../sandbox/index.js';

export interface SandboxDetail {
  readonly name: string;
  readonly state: string;
  readonly tier: string;
  readonly image: string;
  readonly allowHosts: readonly string[];
  readonly runtime: string;
  /** As `ls` says it (egress-state.ts): `detached` is a proxy that runs off the sandbox's network. */
  readonly egress: string;
  /** The sandbox's network: its name, with `(missing)` when gone, or `none`. */
  readonly network: string;
  /** Its subnet (from the address pool; a network made before has the engine's), or `-`. */
  readonly subnet: string;
  readonly volumes: readonly string[];
  readonly limits: { readonly nanoCpus: unknown; readonly memory: unknown; readonly pidsLimit: unknown };
}

/** `sharedNetwork`: the deployment's, after which the shards of its shared egress are named. */
export async function inspectSandbox(engine: DockerEngine, rawName: string, sharedNetwork: string): Promise<SandboxDetail> {
  const name = checkSandboxName(rawName);
  const names = namesFor(name);
  const view = await engine.inspectContainer(name);
  if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist (no container of that name); gc removes leftovers.`);
  const tier = view.labels[LABEL_EGRESS] ?? 'unknown';
  const meaning = meaningOfLabel(view.labels[LABEL_EGRESS]);
  // Its own proxy, or the shard of the shared egress that serves its network.
  const seat = meaning.egressProxy ? await seatOfSandbox(engine, name, view, sharedNetwork) : undefined;
  const proxy = seat === undefined ? undefined : await engine.inspectContainer(seat.container);
  const egress = egressState(stateOf(view), proxy === undefined ? undefined : stateOf(proxy));
  const mounts = Array.isArray(view.hostConfig.Mounts) ? (view.hostConfig.Mounts as Array<{ Type?: string; Source?: string }>) : [];
  return {
    name,
    state: view.paused ? 'paused' : view.status,
    tier,
    image: view.image,
    allowHosts: (await liveAllowHosts(engine, name, seat, proxy)) ?? decodeAllowHosts(view.labels[LABEL_ALLOW_HOSTS] ?? ''),
    runtime: String(view.hostConfig.Runtime ?? ''),
    egress,
    ...(meaning.sandboxNetwork === 'internal' ? await networkOf(engine, view, sandboxNetworkName(names.name, view.labels)) : { network: 'none', subnet: '-' }),
    // Once each: the skills volume is mounted twice (read-only at /skills, writable for root).
    volumes: [...new Set(mounts.filter((m) => m.Type === 'volume' && typeof m.Source === 'string').map((m) => m.Source as string))],
    limits: { nanoCpus: view.hostConfig.NanoCpus, memory: view.hostConfig.Memory, pidsLimit: view.hostConfig.PidsLimit },
  };
}

/**
 * The allowlist in force, from the registration a running, unpaused egress proxy reads (`allow`
 * and `deny` change it while the sandbox runs); undefined for a proxy that takes its policy from
 * its environment, or that cannot be asked (then the label, the list at create, is shown).
 */
async function liveAllowHosts(engine: DockerEngine, name: string, seat: EgressSeat | undefined, proxy: ContainerView | undefined): Promise<string[] | undefined> {
  if (seat === undefined || proxy === undefined || !proxy.running || proxy.paused) return undefined;
  const held = await readRegistration(engine, seat, EGRESS_USER).catch(() => undefined);
  return held?.sandbox === name ? held.policy.allowHosts.map((e) => (typeof e === 'string' ? e : e.host)) : undefined;
}

function stateOf(view: ContainerView): ContainerView & { readonly state: string } {
  return { ...view, state: view.paused ? 'paused' : view.status };
}

/** The network the container names (by id; by name when made before networks were addressed by id). */
async function networkOf(engine: DockerEngine, view: ContainerView, name: string): Promise<{ network: string; subnet: string }> {
  const ref = view.hostConfig.NetworkMode;
  let network;
  try {
    network = typeof ref === 'string' ? await engine.inspectNetwork(ref) : undefined;
  } catch (err) {
    // A name several networks share (a create race before networks were addressed by id).
    if (engineStatus(err) === 400) return { network: `${name} (several networks of this name: destroy and create the sandbox again)`, subnet: '-' };
    throw err;
  }
  if (network === undefined) return { network: `${name} (missing)`, subnet: '-' };
  return { network: network.name, subnet: network.subnets.join(',') || '-' };
}
