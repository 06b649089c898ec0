/**
 * A deployment's shared egress (`egressIsolation: shared`): shards `cap-egress.<k>.<shared network>`, each one proxy
 * process serving up to `egressShardSize` sandboxes. A sandbox is served by the shard that holds a
 * leg on its network:
 * - its registration (the network's subnet, the proxy's address on it, a lifecycle id, the
 *   allowlist) is put into the shard's registrations volume as `<subnet>.json` before the sandbox
 *   starts, so a subnet has one slot whichever sandbox holds it, and the files are as many as the
 *   address pool has subnets;
 * - the shard joins the network at its fixed proxy address, under the alias `cap-<id>-egress` the
 *   sandbox's proxy variables name;
 * - on destroy the slot is made vacant, then the leg is taken away, then the network removed.
 * The shard tells sandboxes apart by the network a connection arrives on (policy/tenants.ts): a
 * sandbox has no capability to forge an address, and no route to another sandbox's network.
 */
import { registrationArchive, TENANTS_DIR } from '../../common/index.js';
import { LABEL_EGRESS_SHARD, LABEL_SUBNET, SandboxError, egressNanoCpus, egressShardName, MAX_EGRESS_SHARDS } from '../spec/index.js';
import { egressShardBody, engineStatus, volumeBody, type ContainerView, type NetworkView, type SandboxEngine } from '../docker/index.js';
import type { BuildDeps } from './build-deps.js';
import { dockerSays } from './concurrent-change.js';

/** How long a shard another call is creating may take to appear. */
const SHARD_APPEARS_MS = 5_000;

/** Where a sandbox's registration lives: the egress container that reads it, and the file's slot. */
export interface EgressSeat {
  readonly container: string;
  readonly slot: string;
}

/** The slot of a sandbox network on a shard: its subnet, `10.213.4.16/28` as `10.213.4.16_28`. */
export function subnetSlot(subnet: string): string {
  const slot = subnet.replace('/', '_');
  if (!/^[0-9]{1,3}(\.[0-9]{1,3}){3}_[0-9]{1,2}$/.test(slot)) throw new SandboxError('engine_error', `The subnet ${JSON.stringify(subnet)} cannot name a registration slot.`);
  return slot;
}

export function vacantArchive(slot: string): Buffer {
  return registrationArchive(slot, { version: 1, vacant: true });
}

/** The registrations file of a seat, as the egress container sees it (for messages). */
export function seatPath(seat: EgressSeat): string {
  return `${seat.container}:${TENANTS_DIR}/${seat.slot}.json`;
}

/**
 * The shard that serves a sandbox, from the label its network and its container carry (set at
 * create, before any leg).
 */
export function shardOfLabels(labels: Readonly<Record<string, string>>, sharedNetwork: string): { readonly index: number; readonly name: string } | undefined {
  const label = labels[LABEL_EGRESS_SHARD];
  if (label === undefined || !/^(0|[1-9][0-9]?)$/.test(label)) return undefined;
  const index = Number(label);
  return { index, name: egressShardName(sharedNetwork, index) };
}

/** The seat of a network on its shard, from the network's labels; undefined for a network no shard serves. */
export function shardSeatOfNetwork(view: Pick<NetworkView, 'labels'>, sharedNetwork: string): EgressSeat | undefined {
  const shard = shardOfLabels(view.labels, sharedNetwork);
  const subnet = view.labels[LABEL_SUBNET];
  return shard === undefined || subnet === undefined ? undefined : { container: shard.name, slot: subnetSlot(subnet) };
}

/** The seat on the shard that serves a network (by id). */
export async function shardSeatOf(engine: SandboxEngine, networkId: string, sharedNetwork: string): Promise<EgressSeat | undefined> {
  const view = await engine.inspectNetwork(networkId);
  return view === undefined ? undefined : shardSeatOfNetwork(view, sharedNetwork);
}

/**
 * Before a sandbox network is removed: the registration of its shard (if one serves it) made
 * vacant, then the shard's leg taken away, running or stopped (a stopped shard keeps the leg in
 * its settings and would not start again once the network is gone). The policy is gone before
 * the subnet can be reused.
 */
export async function leaveShard(engine: SandboxEngine, network: Pick<NetworkView, 'id' | 'labels'>, sharedNetwork: string): Promise<void> {
  const seat = shardSeatOfNetwork(network, sharedNetwork);
  if (seat === undefined) return;
  // A network gone already was left by whoever removed it (this runs before every removal), and
  // its subnet may be another sandbox's now: its registration, in the same slot, would be ended.
  if ((await engine.inspectNetwork(network.id)) === undefined) return;
  try {
    await engine.putRegistration(seat.container, vacantArchive(seat.slot));
  } catch (err) {
    // A shard removed meanwhile holds no leg, and its volume's slot is rewritten before reuse.
    if (engineStatus(err) !== 404) throw err;
  }
  await disconnectShard(engine, seat.container, network.id);
}

/** The sandboxes a shard serves now: one leg per sandbox network, besides the shared network. */
function legsOf(view: ContainerView, sharedNetwork: { id: string; name: string }): number {
  return view.networks.filter((n) => n.id !== sharedNetwork.id && n.name !== sharedNetwork.name).length;
}

/**
 * The shard a new sandbox joins, running: the first with room (`egressShardSize`), made and
 * started when none has. Its room counts its legs and `joining`, the sandboxes this process is
 * joining to it now (ShardClaims). Creates in other controller processes at the same moment can
 * each see the same room, so a shard can pass its size by the number of them; it never refuses one.
 * A shard of another image than `egressProxyImage` (made before the deployment changed it) takes
 * no new sandbox while a place is free for one of the image the deployment names now: it serves
 * those it has, and new ones get a shard of the current image. Such a shard is not removed once
 * empty, so when every place holds one, one of them with room takes the sandbox (logged).
 */
export async function claimShard(deps: BuildDeps, sharedNetwork: string, joining: ReadonlyMap<number, number>): Promise<number> {
  // Shards of another image with room, by place: taken only when no place is left for one of the
  // image configured now. Nothing removes such a shard once it is empty, so after enough upgrades
  // they can hold every place, and skipping them then refused every create as "full".
  const otherImage: Array<{ readonly k: number; readonly view: ContainerView }> = [];
  for (let k = 0; k < MAX_EGRESS_SHARDS; k += 1) {
    const view = await deps.engine.inspectContainer(egressShardName(deps.config.network, k));
    const taken = (view === undefined ? 0 : legsOf(view, { id: sharedNetwork, name: deps.config.network })) + (joining.get(k) ?? 0);
    if (taken >= deps.config.egressShardSize) continue;
    if (view !== undefined && view.image !== deps.config.egressProxyImage) {
      otherImage.push({ k, view });
      continue;
    }
    await ensureShard(deps, k, sharedNetwork, view);
    return k;
  }
  const fallback = otherImage[0];
  if (fallback !== undefined) {
    deps.logger.warn({ shard: egressShardName(deps.config.network, fallback.k), image: fallback.view.image }, 'every place of the shared egress holds a shard; a shard of another image than egressProxyImage takes this sandbox (capybara-sandbox down --all, or destroying its sandboxes and the shard, frees places)');
    await ensureShard(deps, fallback.k, sharedNetwork, fallback.view);
    return fallback.k;
  }
  throw new SandboxError(
    'address_pool_exhausted',
    `Every shard of the shared egress (${MAX_EGRESS_SHARDS} of ${deps.config.egressShardSize} sandboxes) is full; raise extensionConfig."sandbox-docker".egressShardSize or destroy unused sandboxes.`,
  );
}

/**
 * The shard places this controller process has handed out whose leg is not connected yet, so
 * that its creates running at the same moment fill a shard to its size and no further. Claims
 * are made one at a time; each is given back once, when its leg is connected or its create
 * failed.
 */
export class ShardClaims {
  private readonly joining = new Map<number, number>();
  private queue: Promise<unknown> = Promise.resolve();

  /** A place on the first shard with room, and the call that gives it back (idempotent). */
  claim(deps: BuildDeps, sharedNetwork: string): Promise<{ readonly index: number; readonly release: () => void }> {
    const claimed = this.queue.then(async () => {
      const index = await claimShard(deps, sharedNetwork, this.joining);
      this.joining.set(index, (this.joining.get(index) ?? 0) + 1);
      let held = true;
      const release = (): void => {
        if (!held) return;
        held = false;
        const left = (this.joining.get(index) ?? 1) - 1;
        if (left > 0) this.joining.set(index, left);
        else this.joining.delete(index);
      };
      return { index, release };
    });
    this.queue = claimed.catch(() => undefined);
    return claimed;
  }
}

/** Per controller process (its deps): the ensureShard of each shard under way, which calls meanwhile share. */
const ensuring = new WeakMap<BuildDeps, Map<number, Promise<void>>>();

/**
 * Shard `k` created (with its registrations volume) when missing, and running. A create or start
 * another controller made first is as good as done. The recoveries of a process's sandboxes on one
 * shard share one call: each making a shard that cannot start again (below) would remove the one
 * another had just made, or meet it being removed.
 */
export function ensureShard(deps: BuildDeps, k: number, sharedNetwork: string, seen?: ContainerView): Promise<void> {
  let mine = ensuring.get(deps);
  if (mine === undefined) ensuring.set(deps, (mine = new Map()));
  const under = mine.get(k);
  if (under !== undefined) return under;
  const call = ensureShardOnce(deps, k, sharedNetwork, seen).finally(() => {
    if (mine.get(k) === call) mine.delete(k);
  });
  mine.set(k, call);
  return call;
}

async function ensureShardOnce(deps: BuildDeps, k: number, sharedNetwork: string, seen?: ContainerView, remade = false): Promise<void> {
  const { engine, config } = deps;
  const name = egressShardName(config.network, k);
  let view = seen ?? (await engine.inspectContainer(name));
  if (view === undefined) {
    deps.logger.info({ shard: name }, 'starting a shard of the shared egress');
    await engine.createVolume(volumeBody(name, deps.extraLabels, undefined, undefined));
    const plan = { name, index: k, image: config.egressProxyImage, logCaps: config, nanoCpus: egressNanoCpus(config), labels: deps.extraLabels };
    try {
      await engine.createContainer(name, egressShardBody(plan, sharedNetwork, deps.egressTestHosts));
    } catch (err) {
      if (engineStatus(err) !== 409) throw err;
    }
    // A create that lost the race (409) can look before the winner's container is in the
    // engine's store: dockerd reserves the name first.
    const deadline = Date.now() + SHARD_APPEARS_MS;
    view = await engine.inspectContainer(name);
    while (view === undefined && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      view = await engine.inspectContainer(name);
    }
  }
  if (view === undefined) throw new SandboxError('conflict', `The egress shard ${name} was removed while it was being started; retry.`);
  if (view.paused) await engine.unpauseContainer(name);
  if (view.running) return;
  try {
    await engine.startContainer(name);
  } catch (err) {
    const now = await engine.inspectContainer(name);
    if (now?.running === true) return;
    // A stopped container keeps its legs in its settings but holds no endpoint, so `docker network
    // rm` or `prune` can remove a sandbox network (or the shared one) under it: it then never
    // starts again ("network ... not found"), and neither its sandboxes nor a create could go on.
    // Made again from its volume, which keeps every registration; each sandbox's recovery
    // connects its leg again. This container only: one that another call (a recovery of another
    // sandbox on the shard) is making again meanwhile is used once there.
    if (remade || !dockerSays(err, 404, /\bnetwork \S+ not found/i)) throw err;
    if (now?.id === view.id) {
      deps.logger.warn({ shard: name, err }, 'a network of the stopped egress shard is gone, so it cannot start; making it again from its volume');
      await engine.removeContainer(name);
    }
    await ensureShardOnce(deps, k, sharedNetwork, undefined, true);
  }
}

/**
 * Gives the shard its leg on a sandbox network at the proxy's fixed address, answering there to
 * `alias`, the name the sandbox's proxy variables use (`cap-<id>-egress`; none on a warm slot,
 * joined before its sandbox is known: those variables name the address). Already connected is as
 * good as done.
 */
export async function connectShard(deps: BuildDeps, shard: string, network: { readonly id: string; readonly egressAddress: string | undefined }, alias: string | undefined): Promise<void> {
  if (network.egressAddress === undefined) throw new SandboxError('engine_error', `The network ${network.id.slice(0, 12)} has no subnet of its own: a shard cannot serve it.`);
  try {
    await deps.engine.connectNetwork(network.id, shard, network.egressAddress, alias);
  } catch (err) {
    if (!dockerSays(err, 403, /already exists/)) throw err;
  }
}

/**
 * Takes a shard's leg off a network that is about to go. A leg that is gone already is fine:
 * dockerd says so with 403, or with 500 when another process's disconnect of it ran at the same
 * moment (two controller processes destroying one sandbox), worded by dockerd's daemon ("is not
 * connected to network") or by its network library ("is not connected to the network").
 */
export async function disconnectShard(engine: SandboxEngine, shard: string, networkId: string): Promise<void> {
  try {
    await engine.disconnectNetwork(networkId, shard);
  } catch (err) {
    if (!dockerSays(err, 403, /not connected/) && !dockerSays(err, 500, /is not connected to (the )?network/)) throw err;
  }
}
