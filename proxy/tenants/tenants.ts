/**
 * The tenants of a shared egress proxy: which sandbox each connection is, by the registered
 * sandbox network that holds both its addresses (policy/tenants.ts), and what becomes of its open
 * connections when the registrations change. A connection is bound at its accept to its slot and
 * the registration's lifecycle id: when the slot's registration ends, or a later sandbox takes the
 * slot (another lifecycle id), every connection of the earlier one is closed; when its allowlist
 * changes, every connection the new one would not allow is closed: a tunnel is checked as a new
 * tunnel would be (an entry with rules allows none; an opaque one ends where the entry is now tls).
 */
import type { Socket } from 'node:net';
import { recheckTarget, TenantTable, type Policy } from '../../policy/index.js';
import type { ClientConnection, ClientIdentity, Identities } from '../admission/index.js';
import type { DnsHost, DnsStarter } from '../dns/index.js';
import { TenantDns } from './tenant-dns.js';
import { F, logLine, type Logger, type ProxyObserver, type Refusal } from '../record/index.js';
import { NOTHING_ALLOWED, type Tenant, type TenantSettings } from './tenant-policy.js';
import { SlotDirectory } from './slot-directory.js';

class TenantIdentity implements ClientIdentity {
  readonly key: string;
  readonly sandbox: string;

  constructor(
    readonly slot: string,
    readonly lifecycle: string,
    sandbox: string,
    private readonly tenants: Tenants,
  ) {
    this.key = sandbox;
    this.sandbox = sandbox;
  }

  policy(): Policy {
    return this.tenants.policyOf(this.slot, this.lifecycle);
  }
}

/**
 * New connections one sandbox may open a second, and its burst: far above what a build opens
 * (keep-alive pools of tens), and low enough that one sandbox's churn cannot take the event loop
 * from the others (bench/tenants.ts measures it).
 */
export const TENANT_CONNECTION_RATE: ConnectionRate = Object.freeze({ perSecond: 200, burst: 400 });

export interface ConnectionRate {
  readonly perSecond: number;
  readonly burst: number;
}

export class Tenants implements Identities, DnsHost {
  private table = new TenantTable<Tenant>([]);
  private bySlot = new Map<string, Tenant>();
  private readonly open = new Map<string, Set<ClientConnection>>();
  private readonly dns = new Set<TenantDns>();

  constructor(
    private readonly log: Logger,
    readonly connectionRate: ConnectionRate = TENANT_CONNECTION_RATE,
  ) {}

  private observer: ProxyObserver | undefined;

  observe(observer: ProxyObserver): void {
    this.observer = observer;
    observer.sandboxesRegistered(this.table.tenants);
  }

  /** The registered tenants now. */
  get current(): readonly Tenant[] {
    return this.table.tenants;
  }

  identify(socket: Socket, clientIp: string): ClientIdentity | Refusal {
    const found = this.table.identify(socket.localAddress ?? '', clientIp);
    if (!found.ok) return { reason: 'unknown_client', detail: found.detail };
    const { slot, lifecycle, sandbox } = found.tenant;
    return new TenantIdentity(slot, lifecycle, sandbox, this);
  }

  admitted(connection: ClientConnection): void {
    const identity = connection.identity;
    if (!(identity instanceof TenantIdentity)) return;
    let set = this.open.get(identity.slot);
    if (set === undefined) this.open.set(identity.slot, (set = new Set()));
    set.add(connection);
    connection.socket.once('close', () => {
      set.delete(connection);
      if (set.size === 0 && this.open.get(identity.slot) === set) this.open.delete(identity.slot);
    });
  }

  /** The policy of a connection bound to `slot` and `lifecycle`: nothing, once that registration ended. */
  policyOf(slot: string, lifecycle: string): Policy {
    const tenant = this.bySlot.get(slot);
    return tenant !== undefined && tenant.lifecycle === lifecycle ? tenant.policy : NOTHING_ALLOWED;
  }

  /** Serves DNS on every registered network's proxy address (transparent mode), until closed. */
  serve(start: DnsStarter): { close(): Promise<void> } {
    const dns = new TenantDns(start, (slot) => this.bySlot.get(slot), this.log);
    this.dns.add(dns);
    dns.sync(this.table.tenants);
    return {
      close: async () => {
        this.dns.delete(dns);
        await dns.close();
      },
    };
  }

  /** Replaces the registrations; closes what they no longer allow. */
  apply(tenants: readonly Tenant[]): void {
    const before = this.bySlot;
    this.table = new TenantTable(tenants);
    this.bySlot = new Map(tenants.map((t) => [t.slot, t]));
    this.observer?.sandboxesRegistered(tenants);
    for (const dns of this.dns) dns.sync(tenants);
    for (const [a, b] of this.table.overlaps()) {
      logLine(this.log, { [F.event]: 'tenant_overlap', [F.detail]: `${a.sandbox} (${a.subnet.text}) and ${b.sandbox} (${b.subnet.text}) overlap; neither is served where they do` }, 'warn');
    }
    for (const [slot, set] of this.open) {
      const was = before.get(slot);
      const now = this.bySlot.get(slot);
      if (now !== undefined && was !== undefined && now.policy === was.policy && now.lifecycle === was.lifecycle) continue;
      for (const connection of [...set]) this.recheck(connection, now);
    }
  }

  private recheck(connection: ClientConnection, now: Tenant | undefined): void {
    const identity = connection.identity as TenantIdentity;
    let detail: string | undefined;
    if (now === undefined || now.lifecycle !== identity.lifecycle) detail = `the registration of sandbox ${identity.sandbox} ended`;
    else if (connection.target !== undefined) {
      const verdict = recheckTarget(now.policy, connection.target);
      if (!verdict.allowed) detail = `the allowlist of sandbox ${identity.sandbox} no longer allows it (${verdict.detail})`;
    }
    if (detail === undefined) return;
    const target = connection.target;
    logLine(connection.log, { [F.event]: 'revoked', [F.reason]: 'policy_revoked', [F.detail]: detail, ...(target && { [F.host]: target.host, [F.port]: target.port }) }, 'warn');
    connection.revoked = true;
    connection.socket.destroy();
  }
}

/** A shared proxy's tenants, read from `dir` and kept up to date; stop() ends the watch. */
export function openTenants(dir: string, settings: TenantSettings, log: Logger, connectionRate: ConnectionRate = TENANT_CONNECTION_RATE): { tenants: Tenants; stop(): void } {
  const tenants = new Tenants(log, connectionRate);
  const directory = new SlotDirectory(dir, settings, log, (next) => tenants.apply(next));
  tenants.apply(directory.start());
  return { tenants, stop: () => directory.stop() };
}
