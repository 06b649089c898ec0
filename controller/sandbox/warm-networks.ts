/**
 * Warm network slots (`warmSlots`, with `egressIsolation: shared`): sandbox networks this
 * controller process makes before the creates that will use them, each already joined by a shard
 * of the shared egress at its fixed proxy address. A create takes one and skips its two slowest
 * engine steps before the sandbox's own container: making its network and the shard's leg on it.
 * It writes its registration beside its container's start: until it lands the slot is vacant, so
 * the sandbox is refused everything, and the create returns only once the shard serves it.
 *
 * - A warm network is `cap-warm.<token>.<n>`, labelled with this process's token: only the process
 *   that made it hands it out (from memory), so two controller processes never give one to two
 *   sandboxes, with no claim to race on in the engine.
 * - While it waits, its registration on the shard is vacant (written before the leg, over
 *   whatever an earlier holder of the subnet left) and nothing but the shard is on it.
 * - It serves one sandbox: the sandbox's container records it (LABEL_WARM_NETWORK), and destroy
 *   ends the registration, takes the leg away and removes the network, as for any sandbox network.
 *   It never goes back to the pool.
 * - The shard's leg has no alias (the sandbox is not known when it joins), so a sandbox on a warm
 *   network names its proxy by address in its proxy variables.
 * - A warm network that waited WARM_MAX_AGE_MS is removed and replaced; gc removes one nobody
 *   took after STALE_WARM_MS (its process ended), which no process still hands out.
 */
import { randomBytes } from 'node:crypto';
import { LABEL_EGRESS_SHARD, LABEL_SANDBOX, LABEL_SUBNET, LABEL_WARM, egressShardName, warmNetworkName } from '../spec/index.js';
import type { BuildDeps } from './build-deps.js';
import { createOnAddressPool, ensureSharedNetwork, type SandboxNetwork } from './sandbox-network.js';
import { connectShard, leaveShard, subnetSlot, vacantArchive, type ShardClaims } from './shards.js';

/** How long a warm network waits before this process replaces it. */
export const WARM_MAX_AGE_MS = 20 * 60_000;
/** Past this, a warm network no container was made on belongs to no live process (operator/orphans.ts). */
export const STALE_WARM_MS = 30 * 60_000;
/** After a failed refill, how long creates make their own networks before the pool tries again. */
const RETRY_AFTER_FAILURE_MS = 10_000;

/** A network ready for a sandbox: on the address pool, joined by shard `shard`, its registration vacant. */
export interface WarmNetwork {
  readonly name: string;
  readonly network: SandboxNetwork & { readonly subnet: string; readonly egressAddress: string };
  readonly shard: number;
  readonly madeMs: number;
}

export class WarmNetworks {
  private readonly token = randomBytes(4).toString('hex');
  private made = 0;
  private readonly ready: WarmNetwork[] = [];
  /** The makes under way. */
  private readonly filling = new Set<Promise<void>>();
  /** The removals of aged ones under way. */
  private readonly removing = new Set<Promise<void>>();
  private failedMs = -Infinity;

  constructor(
    private readonly deps: BuildDeps,
    /** The create path's shard places: a warm network's leg counts in its shard's room as a sandbox's does. */
    private readonly claims: ShardClaims,
  ) {}

  /** How many this process keeps ready. */
  get size(): number {
    return this.deps.config.egressIsolation === 'shared' ? this.deps.config.warmSlots : 0;
  }

  /**
   * A ready warm network, or undefined (none: the create makes its own). Never the same one
   * twice. The lifecycle refills the pool once none of its creates is under way: a refill beside
   * one would compete for the engine on its critical path (measured: its container's start took
   * longer).
   */
  take(): WarmNetwork | undefined {
    const now = Date.now();
    while (this.ready.length > 0 && now - this.ready[0]!.madeMs > WARM_MAX_AGE_MS) this.removeLater(this.ready.shift()!);
    return this.ready.shift();
  }

  /** Makes warm networks, in the background, until `size` are ready or being made. */
  refill(): void {
    if (Date.now() - this.failedMs < RETRY_AFTER_FAILURE_MS) return;
    while (this.ready.length + this.filling.size < this.size) {
      const making: Promise<void> = this.make().then(
        (warm) => {
          this.ready.push(warm);
        },
        (err: unknown) => {
          // Never lowered: a drain's hold (Infinity) outlasts a make it waited for that failed.
          this.failedMs = Math.max(this.failedMs, Date.now());
          this.deps.logger.warn({ err }, 'a warm network could not be made; creates make their own networks meanwhile');
        },
      ).finally(() => this.filling.delete(making));
      this.filling.add(making);
    }
  }

  /** Refills and waits for it: the number ready then (fewer than `size` when a make failed). */
  async fill(): Promise<number> {
    this.failedMs = -Infinity;
    this.refill();
    while (this.filling.size > 0) await Promise.all([...this.filling]);
    return this.ready.length;
  }

  /**
   * Removes every ready warm network (a controller that stops): its leg and registration first.
   * The makes and removals under way (a create's refill, an aged one) are waited for, the made ones
   * removed too: else their networks, legs (counted in their shard's room) and subnets would stay
   * until a gc half an hour on.
   */
  async drain(): Promise<void> {
    this.failedMs = Infinity;
    while (this.filling.size > 0) await Promise.all([...this.filling]);
    await Promise.all([...this.ready.splice(0).map((w) => this.discard(w)), ...this.removing]);
  }

  /** A removal in the background, which a drain still waits for. */
  private removeLater(warm: WarmNetwork): void {
    const removal: Promise<void> = this.discard(warm).finally(() => this.removing.delete(removal));
    this.removing.add(removal);
  }

  private async make(): Promise<WarmNetwork> {
    const { deps } = this;
    const name = warmNetworkName(this.token, this.made++);
    const claimed = await this.claims.claim(deps, await ensureSharedNetwork(deps));
    try {
      // The sandbox label: gc and down --all list it (operator/orphans.ts).
      const labels = { ...deps.extraLabels, [LABEL_SANDBOX]: '1', [LABEL_WARM]: this.token, [LABEL_EGRESS_SHARD]: String(claimed.index) };
      const network = await createOnAddressPool(deps, name, labels);
      const { subnet, egressAddress } = network;
      if (subnet === undefined || egressAddress === undefined) throw new Error(`warm network ${name} has no subnet of its own`);
      const shard = egressShardName(deps.config.network, claimed.index);
      const warm = { name, network: { ...network, subnet, egressAddress }, shard: claimed.index, madeMs: Date.now() };
      try {
        // Vacant before the leg exists: an earlier sandbox on this subnet may have left its own.
        await deps.engine.putRegistration(shard, vacantArchive(subnetSlot(subnet)));
      } catch (err) {
        // No leg, and nothing of this network's in the slot (every joiner writes its own before
        // its leg): the network alone goes. Leaving the shard would write the slot again and,
        // refused as this was, keep the network: each retry against a shard that keeps refusing
        // (a full volume) would leave one more network and subnet, until gc.
        await deps.engine.removeNetwork(network.id).catch(() => undefined);
        throw err;
      }
      try {
        await connectShard(deps, shard, network, undefined);
      } catch (err) {
        await this.discard(warm);
        throw err;
      }
      return warm;
    } finally {
      claimed.release();
    }
  }

  /**
   * A warm network never handed out again (aged, drained, or taken by a create that failed): its
   * registration ended, its leg taken away, then the network removed. A removal that finds them
   * gone is fine; one that fails is logged, never thrown: gc removes what is left.
   */
  async discard(warm: WarmNetwork): Promise<void> {
    try {
      const labels = { [LABEL_EGRESS_SHARD]: String(warm.shard), [LABEL_SUBNET]: warm.network.subnet };
      await leaveShard(this.deps.engine, { id: warm.network.id, labels }, this.deps.config.network);
      await this.deps.engine.removeNetwork(warm.network.id);
    } catch (err) {
      this.deps.logger.warn({ network: warm.name, err }, 'a warm network could not be removed; gc removes it later');
    }
  }
}
