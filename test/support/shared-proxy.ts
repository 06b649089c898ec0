/**
 * A shared egress proxy on loopback for tests (proxy/tenants/): registrations are slot files in a
 * directory of the test's own, put as the Docker API puts a file (whole, then renamed into place),
 * and the proxy serves every sandbox whose subnet holds a connection's two addresses.
 */
import type { Test } from 'tap';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createEgressProxy, createLookup } from '../../proxy/index.js';
import type { MemoryBudget } from '../../proxy/budget/index.js';
import type { Logger } from '../../proxy/record/index.js';
import { openTenants, type ConnectionRate } from '../../proxy/tenants/index.js';
import { policyOf } from './test-proxy.js';

/** Puts slot `slot` (`<slot>.json`) into `dir`: whole, then renamed into place. */
export function putSlot(dir: string, slot: string, body: string | object): void {
  writeFileSync(join(dir, `.${slot}.part`), typeof body === 'string' ? body : JSON.stringify(body));
  renameSync(join(dir, `.${slot}.part`), join(dir, `${slot}.json`));
}

export interface SharedProxyOptions {
  /** Names pinned to addresses (no lookup). */
  readonly testHosts?: Readonly<Record<string, string>>;
  readonly rate?: ConnectionRate;
  readonly limits?: Parameters<typeof createEgressProxy>[0]['limits'];
  /** Where it listens: 0.0.0.0 (every address of the machine) unless given. */
  readonly host?: string;
  /** The budget of bytes held before a verdict; none (nothing refused for memory) unless given. */
  readonly memory?: MemoryBudget;
  /** EGRESS_REFUSAL_HINT, `{sandbox}` and all. */
  readonly refusalHint?: string;
}

/** A shared proxy over the slots of `dir`, listening; stopped, and `dir` removed, at the test's end. */
export async function startSharedProxy(t: Test, dir: string, logger: Logger, options: SharedProxyOptions = {}) {
  const settings = {
    tunnelDefault: 'opaque' as const,
    ...(options.testHosts === undefined ? {} : { testHosts: options.testHosts }),
    ...(options.refusalHint === undefined ? {} : { refusalHint: options.refusalHint }),
  };
  const shared = options.rate === undefined ? openTenants(dir, settings, logger) : openTenants(dir, settings, logger, options.rate);
  const proxy = createEgressProxy({
    policy: policyOf({ allowHosts: [] }),
    lookup: createLookup({ servers: [], timeoutMs: 500 }),
    logger,
    ...(options.limits === undefined ? {} : { limits: options.limits }),
    ...(options.memory === undefined ? {} : { memory: options.memory }),
    identities: shared.tenants,
  });
  const { port } = await proxy.listen(options.host ?? '0.0.0.0', 0);
  t.teardown(async () => {
    shared.stop();
    await proxy.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { proxy, shared, port };
}
