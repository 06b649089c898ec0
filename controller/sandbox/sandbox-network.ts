/**
 * The networks of a sandbox, by id. Docker 20.10's CheckDuplicate races across processes: two
 * controllers creating one network name at once can both succeed, and from then on every call
 * that names the network fails as ambiguous, for good. So a network is named only when it is
 * created; everything after (containers, connects, inspect, removal) uses the id the create gave
 * back, and a create that finds several networks of its name keeps the oldest and removes the
 * others that are its own (labels) and unused. A sandbox network's subnet comes from the
 * deployment's address pool (spec/address-pool.ts): candidates in a fixed order per name, each
 * tried until the engine takes one (it refuses a subnet that overlaps another network's).
 */
import {
  LABEL_NAME, LABEL_SANDBOX, LABEL_SHARED_NETWORK, LABEL_SUBNET, LABEL_WARM, LABEL_WARM_NETWORK, SandboxError, isSandboxError, isWarmNetworkName, parseAddressPool, sandboxSubnet, subnetAddresses, subnetSlots,
  type SandboxNames,
} from '../spec/index.js';
import {
  engineStatus, internalNetworkBody, sandboxNetworkProblem, sharedNetworkBody, sharedNetworkProblem, type ContainerView, type NetworkView,
} from '../docker/index.js';
import type { BuildDeps } from './build-deps.js';
import { dockerSays } from './concurrent-change.js';
import { leaveShard } from './shards.js';

/** A sandbox's own network: its id, and the egress proxy's fixed address on it. */
export interface SandboxNetwork {
  readonly id: string;
  /** Undefined on a network made before the address pool: it has no subnet of its own to pick from. */
  readonly egressAddress: string | undefined;
  /** Its subnet (`a.b.c.d/p`), with the same exception: what the egress proxy's registration names. */
  readonly subnet: string | undefined;
}

/**
 * Subnets one create tries before it gives up. At a pool a quarter full, 64 taken in a row happen
 * once in 10^38 creates; a pool that refuses 64 is full, or overlapped by someone else's network.
 */
const MAX_SUBNET_TRIES = 64;

function oldestFirst(a: NetworkView, b: NetworkView): number {
  return a.createdMs - b.createdMs || a.id.localeCompare(b.id);
}

/**
 * A sandbox network to use, from its inspect or listing: refused (`network_not_isolated`) when
 * someone changed or replaced it since the controller made it.
 */
export function sandboxNetworkOf(view: NetworkView): SandboxNetwork {
  const problem = sandboxNetworkProblem(view);
  if (problem !== undefined) {
    throw new SandboxError(
      'network_not_isolated',
      `The network ${view.name} (${view.id.slice(0, 12)}) cannot hold a sandbox: ${problem}. Destroy the sandbox (capybara-sandbox destroy ${view.labels[LABEL_NAME] ?? view.name}) or remove the network (docker network rm ${view.id.slice(0, 12)}), and create it again.`,
    );
  }
  // The label names the subnet the controller asked for; the engine's own record must agree.
  const subnet = view.labels[LABEL_SUBNET];
  const addresses = subnet !== undefined && view.subnets.includes(subnet) ? subnetAddresses(subnet) : undefined;
  return { id: view.id, egressAddress: addresses?.egressAddress, subnet: addresses?.subnet };
}

/** Every network named like the sandbox's that carries its labels, oldest first: one, unless a create race made more. */
export async function ownSandboxNetworks(deps: BuildDeps, names: SandboxNames): Promise<NetworkView[]> {
  return namedFor(await deps.engine.listNetworks([`${LABEL_NAME}=${names.name}`]), names);
}

/** Of networks listed by the sandbox's name label, those named after it, oldest first. */
function namedFor(listed: readonly NetworkView[], names: SandboxNames): NetworkView[] {
  return listed.filter((n) => n.name === names.network && n.labels[LABEL_SANDBOX] === '1' && n.labels[LABEL_NAME] === names.name).sort(oldestFirst);
}

/**
 * The warm network a sandbox container's labels name (warm-networks.ts), when it exists and is one
 * the controller made (its labels): a sandbox made on a warm network is on it, not on one named
 * after it. Labels of another deployment's controller (extra labels) do not match.
 */
export async function ownWarmNetwork(deps: BuildDeps, containerLabels: Readonly<Record<string, string>>): Promise<NetworkView | undefined> {
  const name = containerLabels[LABEL_WARM_NETWORK];
  if (!isWarmNetworkName(name)) return undefined;
  const view = await deps.engine.inspectNetwork(name).catch((err: unknown) => {
    // Two of one name only come from a concurrent create, which never makes a warm network.
    if (dockerSays(err, 400, /ambiguous/)) return undefined;
    throw err;
  });
  if (view === undefined || view.name !== name || view.labels[LABEL_WARM] === undefined) return undefined;
  return Object.entries(deps.extraLabels).every(([k, v]) => view.labels[k] === v) ? view : undefined;
}

/**
 * Keeps the oldest of the networks of one name and removes the others, unless something runs on
 * one (Docker refuses, and it stays: every call names its network by id, so it harms nothing).
 * Every process that finds them keeps the same one.
 */
async function keepOldest(deps: BuildDeps, networks: readonly NetworkView[]): Promise<NetworkView> {
  const [kept, ...others] = networks;
  if (kept === undefined) throw new SandboxError('engine_error', 'No network to keep.');
  for (const other of others) {
    try {
      await deps.engine.removeNetwork(other.id);
      deps.logger.warn({ network: other.name, id: other.id, kept: kept.id }, 'removed a duplicate network (a concurrent create made two of one name)');
    } catch (err) {
      if (!dockerSays(err, 403, /active endpoints/)) throw err;
    }
  }
  return kept;
}

/**
 * Creates the sandbox's internal network on the first free subnet of its candidates and returns
 * its id. A network of that name that exists already is another call's (a create of the same id
 * running elsewhere): `conflict`.
 */
export async function createSandboxNetwork(deps: BuildDeps, names: SandboxNames, labels: Readonly<Record<string, string>>): Promise<SandboxNetwork> {
  let made: SandboxNetwork;
  try {
    made = await createOnAddressPool(deps, names.network, labels);
  } catch (err) {
    if (engineStatus(err) === 409) throw await nameTaken(deps, names, err);
    throw err;
  }
  const own = await ownSandboxNetworks(deps, names);
  if (own.length <= 1) return made;
  return sandboxNetworkOf(await keepOldest(deps, own));
}

/**
 * Creates internal network `name` on the first free subnet of its candidates from the address
 * pool; a refusal of the name (409) is thrown as dockerd gave it.
 */
export async function createOnAddressPool(deps: BuildDeps, name: string, labels: Readonly<Record<string, string>>): Promise<SandboxNetwork> {
  const { engine, config } = deps;
  const pool = parseAddressPool(config.addressPool, config.subnetPrefix);
  let tries = 0;
  for (const slot of subnetSlots(pool, name)) {
    if (tries === MAX_SUBNET_TRIES) break;
    tries += 1;
    const addresses = sandboxSubnet(pool, slot);
    try {
      const id = await engine.createNetwork(internalNetworkBody(name, labels, addresses));
      return { id, egressAddress: addresses.egressAddress, subnet: addresses.subnet };
    } catch (err) {
      // Taken by another network: the next candidate.
      // "Pool overlaps with other one on this address space" (IPAM), "... conflicts with network
      // ...: networks have overlapping IPv4" (the bridge driver, a create that lost a race).
      if (dockerSays(err, 403, /overlap/i)) continue;
      throw err;
    }
  }
  throw new SandboxError(
    'address_pool_exhausted',
    `No /${pool.subnetPrefix} subnet of the address pool ${config.addressPool} was free for ${name} (${tries} tried): the pool is full or another network overlaps it. ` +
      'Destroy unused sandboxes (capybara-sandbox gc removes orphans), or give extensionConfig."sandbox-docker".addressPool a larger or another private block.',
  );
}

async function nameTaken(deps: BuildDeps, names: SandboxNames, cause: unknown): Promise<SandboxError> {
  const own = await ownSandboxNetworks(deps, names);
  if (own.length > 0) {
    return new SandboxError('conflict', `Network ${names.network} was created by another call at the same time (a create of ${names.name} running elsewhere); retry.`, { cause });
  }
  return new SandboxError(
    'conflict',
    `A network named ${names.network} exists that this controller did not make (it lacks the labels ${LABEL_SANDBOX}=1 and ${LABEL_NAME}=${names.name}); remove it (docker network rm ${names.network}) and retry.`,
    { cause },
  );
}

/**
 * The sandbox network recovery brings back: the one the container names when it still exists
 * (by id; a name, for a sandbox made before networks were addressed by id), else a new one, as
 * a create makes it, or the one another call made of that name meanwhile.
 */
export async function findOrRecreateSandboxNetwork(
  deps: BuildDeps,
  names: SandboxNames,
  view: ContainerView,
  labels: Readonly<Record<string, string>>,
  /** Whether the sandbox is still the container `view` (recovery.ts); a network is made only for it. */
  same: () => Promise<boolean> = async () => true,
): Promise<{ readonly network: SandboxNetwork; readonly rebuilt: boolean }> {
  const ref = view.hostConfig.NetworkMode;
  if (isWarmNetworkName(view.labels[LABEL_WARM_NETWORK])) return findOrRecreateWarmNetwork(deps, names, view, labels, same);
  const own = await ownSandboxNetworks(deps, names);
  const current = own.find((n) => n.id === ref || n.name === ref);
  if (current !== undefined) return { network: sandboxNetworkOf(current), rebuilt: false };
  // Gone, and another call made a new one meanwhile.
  if (own.length > 0) return { network: sandboxNetworkOf(await keepOldest(deps, own)), rebuilt: true };
  deps.logger.warn({ sandbox: names.name }, 'internal network missing, recreating it');
  try {
    return { network: await madeForSandbox(deps, names, same, () => createSandboxNetwork(deps, names, labels)), rebuilt: true };
  } catch (err) {
    // A concurrent recovery made it first: use that one.
    if (!isSandboxError(err, 'conflict')) throw err;
    const made = await ownSandboxNetworks(deps, names);
    if (made.length === 0) throw err;
    return { network: sandboxNetworkOf(await keepOldest(deps, made)), rebuilt: true };
  }
}

/**
 * A network a recovery makes again, only while the sandbox is still the container it read: one
 * destroyed by another process meanwhile (its destroy found no network to remove) would otherwise
 * keep the network, and the proxy the recovery then rebuilt on it, after that destroy said done.
 * Made and then found destroyed, the network is removed again (by id: only this one).
 */
async function madeForSandbox(deps: BuildDeps, names: SandboxNames, same: () => Promise<boolean>, make: () => Promise<SandboxNetwork>): Promise<SandboxNetwork> {
  const gone = (): SandboxError => new SandboxError('conflict', `${names.name} was destroyed or made again by another call while this recovery ran; retry.`);
  if (!(await same())) throw gone();
  const network = await make();
  if (await same()) return network;
  await deps.engine.removeNetwork(network.id).catch((err: unknown) => deps.logger.warn({ sandbox: names.name, network: network.id, err }, 'a network made again for a sandbox destroyed meanwhile could not be removed'));
  throw gone();
}

/** The warm label of a warm network a recovery made again for one sandbox (and labelled as its own). */
const RECOVERED_WARM = 'recovered';

/**
 * A sandbox made on a warm network: that network when it still exists, else one made again under
 * its name, with the sandbox's labels (gc then treats it as any sandbox network), on a subnet of
 * the pool; the container is then made again on it, its proxy variables naming the proxy's
 * address there (recovery.ts).
 *
 * The label is believed only for a network the container is on, or one made again for this
 * sandbox: dockerd merges an image's labels into the container's, so a container made again from
 * its image tag, or seen by another replica before its create refused the image, can name another
 * sandbox's warm network: recovery would make such a sandbox again on that network, beside the
 * other sandbox, and write its own registration into the other's slot (the other then served its
 * list).
 */
async function findOrRecreateWarmNetwork(
  deps: BuildDeps,
  names: SandboxNames,
  view: ContainerView,
  labels: Readonly<Record<string, string>>,
  same: () => Promise<boolean>,
): Promise<{ readonly network: SandboxNetwork; readonly rebuilt: boolean }> {
  const found = await ownWarmNetwork(deps, view.labels);
  if (found !== undefined) {
    const onIt = found.id === view.hostConfig.NetworkMode || found.name === view.hostConfig.NetworkMode;
    if (!onIt && found.labels[LABEL_NAME] !== names.name) {
      throw new SandboxError('engine_error', `Sandbox ${names.name} names warm network ${found.name}, which it is not on and which was not made for it (a label of its image?); destroy it and create it again from another image.`);
    }
    return { network: sandboxNetworkOf(found), rebuilt: !onIt };
  }
  const name = view.labels[LABEL_WARM_NETWORK]!;
  deps.logger.warn({ network: name }, 'warm network missing, recreating it');
  try {
    return { network: await madeForSandbox(deps, names, same, () => createOnAddressPool(deps, name, { ...labels, [LABEL_WARM]: RECOVERED_WARM })), rebuilt: true };
  } catch (err) {
    // A concurrent recovery made it first: use that one.
    if (engineStatus(err) !== 409) throw err;
    const made = await ownWarmNetwork(deps, view.labels);
    // Made by a concurrent recovery of this sandbox, not a pool's network of the name.
    if (made === undefined || made.labels[LABEL_NAME] !== names.name) throw err;
    return { network: sandboxNetworkOf(made), rebuilt: true };
  }
}

/**
 * Removes every network of the sandbox's name that carries its labels (duplicates included), and
 * the warm network `warm` it was made on, if any, each after its registration with a shard of the
 * shared egress has ended (shards.ts). A warm network a recovery made again for this sandbox (its
 * labels, findOrRecreateWarmNetwork) goes too, found by them: when its container is gone (a
 * rebuild that removed it and failed) nothing else names it, and it would outlive the destroy and
 * `down --all`, its leg and the sandbox's registration with it. One listing finds both.
 */
export async function removeSandboxNetworks(deps: BuildDeps, names: SandboxNames, warm?: NetworkView): Promise<void> {
  const listed = await deps.engine.listNetworks([`${LABEL_NAME}=${names.name}`]);
  const remade = listed.filter((n) => isWarmNetworkName(n.name) && n.labels[LABEL_WARM] === RECOVERED_WARM && n.labels[LABEL_SANDBOX] === '1' && n.labels[LABEL_NAME] === names.name);
  const all = [...namedFor(listed, names), ...remade, ...(warm === undefined ? [] : [warm])];
  await Promise.all(
    all.filter((n, i) => all.findIndex((m) => m.id === n.id) === i).map(async (n) => {
      await leaveShard(deps.engine, n, deps.config.network);
      await deps.engine.removeNetwork(n.id);
    }),
  );
}

/**
 * The id of the deployment's shared network, created (inter-container traffic off) when missing.
 * Made by several controllers at once it can exist twice: the oldest of those this controller
 * labelled is kept. An operator's own network of that name is used as it is.
 */
export async function ensureSharedNetwork(deps: BuildDeps): Promise<string> {
  const { engine, config } = deps;
  try {
    const found = await engine.inspectNetwork(config.network);
    if (found !== undefined) return usableShared(found);
  } catch (err) {
    if (!dockerSays(err, 400, /ambiguous/)) throw err;
    return resolveSharedNetwork(deps, err);
  }
  try {
    await engine.createNetwork(sharedNetworkBody(config.network, deps.extraLabels));
  } catch (err) {
    // The shared network's subnet comes from the daemon's default-address-pools (about 30
    // networks on a default Docker 20.10, shared with everything on the host); dockerd answers
    // their exhaustion with a 404, which must not read as a concurrent removal.
    if (dockerSays(err, 404, DAEMON_POOLS_EXHAUSTED)) {
      throw new SandboxError(
        'address_pool_exhausted',
        `Docker has no free subnet in its default-address-pools for the shared network ${config.network}: other networks on the engine hold them all. ` +
          'Remove networks nothing uses, or give dockerd larger default-address-pools in /etc/docker/daemon.json (outside extensionConfig."sandbox-docker".addressPool; see docs/operator.md).',
        { cause: err },
      );
    }
    // Created by a concurrent call meanwhile.
    if (engineStatus(err) !== 409) throw err;
  }
  return resolveSharedNetwork(deps, undefined);
}

/** dockerd's words when its default-address-pools have no subnet left (answered 404). */
const DAEMON_POOLS_EXHAUSTED = /could not find an available, non-overlapping IPv4 address pool/i;

async function resolveSharedNetwork(deps: BuildDeps, cause: unknown): Promise<string> {
  const { engine, config } = deps;
  const own = (await engine.listNetworks([`${LABEL_SHARED_NETWORK}=${config.network}`])).filter((n) => n.name === config.network).sort(oldestFirst);
  if (own.length > 0) return usableShared(await keepOldest(deps, own));
  // Not the controller's: the operator's network of that name, once.
  const found = await engine.inspectNetwork(config.network).catch((err: unknown) => {
    if (!dockerSays(err, 400, /ambiguous/)) throw err;
    throw new SandboxError(
      'conflict',
      `Several networks are named ${config.network} and none was made by this controller; keep one (docker network ls --filter name=${config.network}) or set extensionConfig."sandbox-docker".network to another name.`,
      { cause: cause ?? err },
    );
  });
  if (found === undefined) throw new SandboxError('conflict', `The shared network ${config.network} was removed while it was being created; retry.`, { cause });
  return usableShared(found);
}

/** The shared network's id, once its options keep sandboxes apart (`network_not_isolated` else). */
function usableShared(view: NetworkView): string {
  const problem = sharedNetworkProblem(view);
  if (problem === undefined) return view.id;
  throw new SandboxError(
    'network_not_isolated',
    `The shared network ${view.name} (${view.id.slice(0, 12)}) cannot be used: ${problem}. Remove it once nothing runs on it (docker network rm ${view.name}; the controller then makes it again, with the right options), or set extensionConfig."sandbox-docker".network to another name.`,
  );
}
