/**
 * The registration of an allowlist sandbox's network with its egress proxy (the shared proxy's
 * format, policy/tenants.ts; written as common/tenant-archive.ts's archive): the sandbox, a
 * lifecycle id, the network's subnet, the proxy's address on it, and the allowlist.
 */
import { randomUUID } from 'node:crypto';
import type { SlotFileValue } from '../../common/index.js';
import type { SandboxNames } from '../spec/index.js';
import type { EgressMode } from './container-spec.js';

/** A registration of `names`'s network with `allowHosts`; a new lifecycle id unless one is given. */
export function egressRegistration(
  names: SandboxNames,
  network: { subnet: string; address: string },
  allowHosts: readonly string[],
  mode: EgressMode,
  lifecycle: string = randomUUID(),
): Extract<SlotFileValue, { readonly lifecycle: string }> {
  return { version: 1, sandbox: names.name, lifecycle, subnet: network.subnet, address: network.address, policy: { allowHosts, ...(mode === 'report' ? { mode } : {}) } };
}
