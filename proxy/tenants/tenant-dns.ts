/**
 * A shared proxy's DNS responders: one per registered sandbox network, bound to the proxy's
 * address on it and answering allowed names with that address. The address appears only once
 * the controller has joined the proxy to the network, so a responder is bound with retries
 * (BIND_RETRY_MIN_MS doubling to BIND_RETRY_MAX_MS) for as long as its registration lasts. A
 * query is answered by the registration holding its client's address now; any other client gets
 * REFUSED (unknown_client).
 */
import { ipv4Number, subnetHolds, type Policy } from '../../policy/index.js';
import type { DnsResponder, DnsStarter } from '../dns/index.js';
import { F, logLine, type Logger } from '../record/index.js';
import type { Tenant } from './tenant-policy.js';

const BIND_RETRY_MIN_MS = 20;
const BIND_RETRY_MAX_MS = 200;

interface Running {
  readonly address: string;
  responder: DnsResponder | undefined;
  stopped: boolean;
}

export class TenantDns {
  private readonly running = new Map<string, Running>();
  private closed = false;

  constructor(
    private readonly start: DnsStarter,
    private readonly current: (slot: string) => Tenant | undefined,
    private readonly log: Logger,
  ) {}

  /** Starts and stops responders to match the registrations. */
  sync(tenants: readonly Tenant[]): void {
    if (this.closed) return;
    const wanted = new Map(tenants.map((t) => [t.slot, t.address]));
    for (const [slot, run] of this.running) {
      if (wanted.get(slot) === run.address) continue;
      this.stop(slot, run);
    }
    for (const [slot, address] of wanted) if (!this.running.has(slot)) this.launch(slot, address);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.running].map(([slot, run]) => this.stop(slot, run)));
  }

  /** The policy a client of `slot`'s network is answered by: none outside its registered subnet. */
  private policyFor(slot: string, clientIp: string): Policy | undefined {
    const tenant = this.current(slot);
    const client = ipv4Number(clientIp);
    return tenant !== undefined && client !== undefined && subnetHolds(tenant.subnet, client) ? tenant.policy : undefined;
  }

  private launch(slot: string, address: string): void {
    const run: Running = { address, responder: undefined, stopped: false };
    this.running.set(slot, run);
    const log = this.log.child({ slot });
    void (async () => {
      for (let wait = BIND_RETRY_MIN_MS; !run.stopped; wait = Math.min(wait * 2, BIND_RETRY_MAX_MS)) {
        try {
          const responder = await this.start(address, (clientIp) => this.policyFor(slot, clientIp), log, () => this.current(slot)?.sandbox);
          if (run.stopped) return void (await responder.close());
          run.responder = responder;
          return;
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code !== 'EADDRNOTAVAIL') {
            logLine(log, { [F.event]: 'tenant_dns_failed', address, [F.error]: code ?? (err as Error).message }, 'warn');
          }
          await new Promise((r) => setTimeout(r, wait).unref());
        }
      }
    })();
  }

  private async stop(slot: string, run: Running): Promise<void> {
    run.stopped = true;
    if (this.running.get(slot) === run) this.running.delete(slot);
    await run.responder?.close();
  }
}
