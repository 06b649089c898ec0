/**
 * The check before each command that a sandbox's registration is still in place (recovery.ts), in
 * its shard or in its own proxy's volume: without it the proxy refuses every request of the
 * sandbox (fail closed) until a recovery writes it back. The registration is read by a `cat` in
 * the proxy, so a read found whole is taken as held for REGISTRATION_CHECKED_MS, for the same
 * proxy container and network: one exec per sandbox per period, not one per command. A proxy or a
 * network made again (another container or network id) is read at once.
 */
import type { SandboxEngine } from '../docker/index.js';
import { EGRESS_SLOT, EGRESS_USER, holdsRegistration, readRegistration, registrable } from './egress-policy.js';
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
   * Whether the proxy (`proxy`: a shard, or the sandbox's own) holds sandbox `name`'s
   * registration for its network (`networkId`): its name, subnet and proxy address. A read that
   * fails is the engine's error, not a missing registration.
   */
  async held(engine: SandboxEngine, name: string, proxy: { readonly name: string; readonly id: string; readonly host: 'own' | 'shard' }, networkId: string): Promise<boolean> {
    const key = `${proxy.id} ${networkId}`;
    const seen = this.found.get(name);
    if (seen !== undefined && seen.key === key && this.now() - seen.at < REGISTRATION_CHECKED_MS) return true;
    this.found.delete(name);
    const view = await engine.inspectNetwork(networkId);
    const target = view === undefined ? undefined : registrable(sandboxNetworkOf(view));
    if (target === undefined) return false;
    const held = await readRegistration(engine, { container: proxy.name, slot: proxy.host === 'own' ? EGRESS_SLOT : subnetSlot(target.subnet) }, EGRESS_USER);
    if (!holdsRegistration(held, name, target)) return false;
    if (this.found.size >= MAX_REMEMBERED) this.found.delete(this.found.keys().next().value as string);
    this.found.set(name, { key, at: this.now() });
    return true;
  }
}
