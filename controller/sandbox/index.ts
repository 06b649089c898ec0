/**
 * The Docker objects of one sandbox over its life: create, suspend, destroy, the recovery that
 * brings a stopped, paused or partly removed sandbox back, one change per sandbox at a time, and
 * the egress usage read from its proxy.
 */
export { SandboxLifecycle } from './lifecycle.js';
export { SandboxRecovery } from './recovery.js';
export { SandboxLanes, workspaceLane } from './sandbox-lanes.js';
export { readSandboxEgressUsage } from './egress-usage.js';
export type { EgressUsage } from './egress-usage.js';
export { CredentialSource } from './credential-source.js';
export { changeAllowHosts, MAX_ALLOW_HOSTS } from './allowlist-change.js';
export { EGRESS_USER, readRegistration, seatOfSandbox } from './egress-policy.js';
export { leaveShard, shardOfLabels } from './shards.js';
export { STALE_WARM_MS } from './warm-networks.js';
export type { EgressSeat } from './shards.js';
