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

/** The proxy a registration is read in: a shard, or the sandbox's own. */
export interface RegistrationProxy {
  readonly name: string;
  /** Its container id: a proxy made again is read at once. */
  readonly id: string;
  readonly host: 'own' | 'shard';
}

export class RegistrationChecks {
  /**
   * Per sandbox: the proxy container and network its registration was last read on, when, and
   * that read, which the commands asking meanwhile share.
   */
  private readonly reads = new Map<string, { readonly key: string; readonly at: number; readonly read: Promise<boolean> }>();

  /** `unreadable`: told of a read that failed (once per read). */
  constructor(
    private readonly unreadable: (name: string, proxy: RegistrationProxy, err: unknown) => void,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Whether `proxy` holds sandbox `name`'s registration for its network (`networkId`): its name,
   * subnet and proxy address. A registration found missing is read again at the next ask (after
   * the recovery that writes it). A read that fails counts as held for the period: the command
   * goes on (a proxy without the registration refuses everything meanwhile, fail closed), and a
   * proxy that cannot be read (restarting, crashing) is not asked again at each command.
   */
  held(engine: SandboxEngine, name: string, proxy: RegistrationProxy, networkId: string): Promise<boolean> {
    const key = `${proxy.id} ${networkId}`;
    const last = this.reads.get(name);
    if (last !== undefined && last.key === key && this.now() - last.at < REGISTRATION_CHECKED_MS) return last.read;
    const read = readHeld(engine, name, proxy, networkId).catch((err: unknown) => {
      this.unreadable(name, proxy, err);
      return true;
    });
    this.reads.delete(name);
    if (this.reads.size >= MAX_REMEMBERED) this.reads.delete(this.reads.keys().next().value as string);
    this.reads.set(name, { key, at: this.now(), read });
    void read.then((held) => {
      if (!held && this.reads.get(name)?.read === read) this.reads.delete(name);
    });
    return read;
  }
}

async function readHeld(engine: SandboxEngine, name: string, proxy: RegistrationProxy, networkId: string): Promise<boolean> {
  const view = await engine.inspectNetwork(networkId);
  const target = view === undefined ? undefined : registrable(sandboxNetworkOf(view));
  if (target === undefined) return false;
  // A `docker pause` of the proxy between the caller's inspect and this exec is the one way this
  // execs into a paused container; the sandbox's own command has the same window.
  const held = await readRegistration(engine, { container: proxy.name, slot: proxy.host === 'own' ? EGRESS_SLOT : subnetSlot(target.subnet) }, EGRESS_USER);
  return held !== undefined && holdsRegistration(held, name, target);
}
