/**
 * Whether a sandbox's container create bodies fit in one request body as the socket proxy
 * accepts it (haproxy/haproxy.cfg refuses a body over 32 KiB), measured on the bodies this
 * controller sends, before any engine call. The allowlist is what grows them (the sandbox
 * container's label and the egress proxy's environment each carry all of it), so a list too long
 * is refused naming its count and how many of its entries fit, instead of a body-size error
 * part-way through a create.
 */
import {
  LABEL_EGRESS_ISOLATION, LABEL_EGRESS_SHARD, MAX_EGRESS_SHARDS, SandboxError, TIERS, onWarmNetwork, type SandboxPlan, withAllowHosts,
} from '../spec/index.js';
import { egressContainerBody, sandboxContainerBody } from './container-spec.js';
import { egressRegistration } from './registration-spec.js';
import { MAX_BODY_BYTES } from './engine-call.js';

interface Measured {
  readonly what: string;
  readonly bytes: number;
}

/** Networks are named in a create body by id: Docker's ids are 64 hex digits, the longest reference. */
const NETWORK_ID = '0'.repeat(64);
/** The egress proxy's address on the sandbox network (both bodies carry it), at its longest. */
const LONGEST_ADDRESS = '255.255.255.255';
/** A registration's network and lifecycle id (a UUID), at their longest. */
const LONGEST_NETWORK = { subnet: '255.255.255.240/28', address: LONGEST_ADDRESS };
const LONGEST_LIFECYCLE = '0'.repeat(36);
const TAR_BLOCK = 512;
/**
 * What a create adds to a shard sandbox's container (sandbox/lifecycle.ts), at its longest: the
 * shard's number and the isolation, and on a warm network its name and the proxy variables by
 * address. Measured without them, a spec.env that just fit went over part-way through a create.
 */
const LONGEST_SHARD_LABELS = { [LABEL_EGRESS_ISOLATION]: 'shared', [LABEL_EGRESS_SHARD]: String(MAX_EGRESS_SHARDS - 1) };
const LONGEST_WARM_NETWORK = 'cap-warm.ffffffff.999999999';

/** The larger of the plan's create bodies, serialised as the engine sends it; `shared`: the deployment's egress is sharded. */
function largestBody(plan: SandboxPlan, testHosts: Readonly<Record<string, string>> | undefined, shared: boolean): Measured {
  const sandboxBody = (p: SandboxPlan): Measured => ({ what: 'sandbox container\'s create body', bytes: Buffer.byteLength(JSON.stringify(sandboxContainerBody(p, NETWORK_ID, LONGEST_ADDRESS))) });
  const bodies: Measured[] = [sandboxBody(plan)];
  if (shared && TIERS[plan.tier].egressProxy && plan.credentials === undefined) {
    bodies.push(sandboxBody(onWarmNetwork({ ...plan, containerLabels: { ...plan.containerLabels, ...LONGEST_SHARD_LABELS } }, LONGEST_WARM_NETWORK, LONGEST_ADDRESS)));
  }
  if (TIERS[plan.tier].egressProxy) {
    bodies.push({ what: 'egress proxy\'s create body', bytes: Buffer.byteLength(JSON.stringify(egressContainerBody(plan, NETWORK_ID, testHosts, LONGEST_ADDRESS))) });
    // Its registration (build-steps.ts), as an archive: a header, the content in whole blocks, two end blocks.
    if (plan.credentials === undefined) {
      const content = Buffer.byteLength(JSON.stringify(egressRegistration(plan.names, LONGEST_NETWORK, plan.allowHosts, 'report', LONGEST_LIFECYCLE))) + 1;
      bodies.push({ what: 'egress proxy\'s registration archive', bytes: TAR_BLOCK + Math.ceil(content / TAR_BLOCK) * TAR_BLOCK + 2 * TAR_BLOCK });
    }
  }
  return bodies.reduce((a, b) => (b.bytes > a.bytes ? b : a));
}

export function checkCreateBodies(plan: SandboxPlan, testHosts: Readonly<Record<string, string>> | undefined, shared = false): void {
  const largest = largestBody(plan, testHosts, shared);
  if (largest.bytes <= MAX_BODY_BYTES) return;
  const fits = (count: number): boolean => largestBody(withAllowHosts(plan, plan.allowHosts.slice(0, count)), testHosts, shared).bytes <= MAX_BODY_BYTES;
  const hosts = plan.allowHosts.length;
  if (hosts === 0 || !fits(0)) {
    throw new SandboxError('invalid_spec', `The sandbox spec was refused: the ${largest.what} would be ${largest.bytes} bytes, over the ${MAX_BODY_BYTES} bytes the socket proxy accepts in one body; shorten spec.env.`);
  }
  // The most entries (in the caller's order) that fit: fits(low) holds, fits(high) does not.
  let low = 0;
  let high = hosts;
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    if (fits(mid)) low = mid;
    else high = mid;
  }
  throw new SandboxError(
    'invalid_spec',
    `The sandbox spec was refused: spec.limits.allowHosts has ${hosts} entries, and the ${largest.what} would be ${largest.bytes} bytes, over the ${MAX_BODY_BYTES} bytes the socket proxy accepts in one body; at most ${low} of these entries fit. Cover several hosts with one wildcard entry (*.example.com), or use fewer.`,
  );
}
