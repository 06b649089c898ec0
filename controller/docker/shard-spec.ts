/**
 * A shard of a deployment's shared egress (`cap-egress.<k>.<shared network>`): one proxy process that serves every
 * sandbox registered in its volume, told apart by network (policy/tenants.ts). It is created on
 * the shared network like a sandbox's own proxy, with the same hardening, and joins each sandbox's
 * network at that network's fixed proxy address (sandbox/shards.ts). Its listeners take every
 * address: a connection or query from an address no registration holds is refused, and so is one
 * from the shared network.
 */
import { EGRESS_ENV, EGRESS_HINT_SANDBOX, EGRESS_METRICS_PORT, EGRESS_PROXY_PORT, TENANTS_DIR } from '../../common/index.js';
import { LABEL_EGRESS_SHARD, LABEL_SANDBOX, type LogCaps } from '../spec/index.js';
import { egressHostConfig, type ContainerCreateBody } from './container-spec.js';

/** A shard's memory: its process's share per sandbox is small (the tenants bench: about 40 KiB idle), its connections are not. */
const SHARD_MEMORY_BYTES = 1024 * 1024 * 1024;

export interface ShardPlan {
  readonly name: string;
  readonly index: number;
  readonly image: string;
  readonly logCaps: LogCaps;
  readonly nanoCpus: number;
  /** The deployment's own labels (the controller's extra labels). */
  readonly labels: Readonly<Record<string, string>>;
}

/** What a refusal of a host off a sandbox's allowlist advises: the operator changes it in place. */
const SHARD_REFUSAL_HINT = `the allowlist is the operator's: "capybara-sandbox allow ${EGRESS_HINT_SANDBOX} HOST" allows a host, "capybara-sandbox logs ${EGRESS_HINT_SANDBOX}" shows the decisions`;

/** The shard's create body; its registrations volume has the shard's name. */
export function egressShardBody(plan: ShardPlan, sharedNetwork: string, testHosts: Readonly<Record<string, string>> | undefined): ContainerCreateBody {
  const env: Record<string, string> = {
    [EGRESS_ENV.tenantsDir]: TENANTS_DIR,
    [EGRESS_ENV.listen]: `0.0.0.0:${EGRESS_PROXY_PORT}`,
    // Every sandbox network's proxy address, as each leg appears; DNS is answered per registration.
    [EGRESS_ENV.transparentListen]: '0.0.0.0',
    [EGRESS_ENV.metricsListen]: `127.0.0.1:${EGRESS_METRICS_PORT}`,
    [EGRESS_ENV.refusalHint]: SHARD_REFUSAL_HINT,
    ...(testHosts !== undefined && Object.keys(testHosts).length > 0 ? { [EGRESS_ENV.testHosts]: JSON.stringify(testHosts) } : {}),
  };
  return {
    Image: plan.image,
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: { ...plan.labels, [LABEL_SANDBOX]: '1', [LABEL_EGRESS_SHARD]: String(plan.index) },
    Healthcheck: { Test: ['NONE'] },
    HostConfig: egressHostConfig(sharedNetwork, plan.nanoCpus, SHARD_MEMORY_BYTES, plan.logCaps, plan.name),
  };
}
