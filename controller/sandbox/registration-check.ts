/**
 * The check before each command that a shard sandbox's registration is still in place (recovery.ts):
 * without it the shard refuses every request of the sandbox (fail closed) until a `resume`. The
 * registration is read by a `cat` in the shard, so a read found whole is taken as held for
 * REGISTRATION_CHECKED_MS, for the same shard container and network: one exec per sandbox per
 * period, not one per command. A shard made again (a new container) or a network made again is
 * read at once.
 */
import type { SandboxEngine } from '../docker/index.js';
import { EGRESS_USER, holdsRegistration, readRegistration, registrable } from './egress-policy.js';
import { sandboxNetworkOf } from './sandbox-network.js';
import { subnetSlot } from './shards.js';

/** How long a registration read and found whole is taken as held. */
export const REGISTRATION_CHECKED_MS = 10_000;
/** Sandboxes remembered at most: past that the oldest is read again at its next command. */
const MAX_REMEMBERED = 4_096;

export class RegistrationChecks {
  /** Per sandbox: the shard container and network its registration was found on, and when. */
  private readonly found = new Map<string, { readonly key: string; readonly at: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * Whether the shard (`shard`, its container `shardId`) holds sandbox `name`'s registration for
   * its network (`networkId`): its name, subnet and proxy address. A read that fails is the
   * engine's error, not a missing registration.
   */
  async held(engine: SandboxEngine, name: string, shard: { readonly name: string; readonly id: string }, networkId: string): Promise<boolean> {
    const key = `${shard.id} ${networkId}`;
    const seen = this.found.get(name);
    if (seen !== undefined && seen.key === key && this.now() - seen.at < REGISTRATION_CHECKED_MS) return true;
    this.found.delete(name);
    const view = await engine.inspectNetwork(networkId);
    const target = view === undefined ? undefined : registrable(sandboxNetworkOf(view));
    if (target === undefined) return false;
    const held = await readRegistration(engine, { container: shard.name, slot: subnetSlot(target.subnet) }, EGRESS_USER);
    if (!holdsRegistration(held, name, target)) return false;
    if (this.found.size >= MAX_REMEMBERED) this.found.delete(this.found.keys().next().value as string);
    this.found.set(name, { key, at: this.now() });
    return true;
  }
}
