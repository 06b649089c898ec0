/**
 * What a sandbox is, before any engine call: the `sandbox@1` contract, the deployment config,
 * the spec and exec option schemas, names and labels, limits, the error catalog and the plan a
 * spec becomes. Pure; imports nothing from the other rooms.
 */
export type { SandboxProvider, SandboxHandle, SandboxSpec, SandboxLimits, SandboxWorkspace, EgressTier, ExecOptions, ExecResult, FileStat } from './contract.js';
export { deploymentConfigSchema, parseDeploymentConfig } from './config.js';
export type { DeploymentConfig, DeploymentConfigInput, LogCaps, MaxLimits } from './config.js';
export { SandboxError, isSandboxError, sandboxErrorCodes } from './errors.js';
export type { SandboxErrorCode } from './errors.js';
export { checkExecOptions } from './exec-options.js';
export type { CheckedExecOptions, ExecCeilings, OutputSink } from './exec-options.js';
export {
  LABEL_ALLOW_HOSTS,
  LABEL_EGRESS,
  LABEL_EGRESS_ISOLATION,
  LABEL_EGRESS_SHARD,
  LABEL_NAME,
  LABEL_SANDBOX,
  LABEL_SHARED_NETWORK,
  LABEL_WARM,
  LABEL_WARM_NETWORK,
  LABEL_SUBNET,
  LABEL_WORKSPACE_KEY,
  SANDBOX_TAG_RE,
  SANDBOX_UID,
  checkSandboxName,
  checkTag,
  EGRESS_SHARD_PREFIX,
  egressShardName,
  MAX_EGRESS_SHARDS,
  isWarmNetworkName,
  namesFor,
  persistentWorkspaceVolume,
  sandboxNetworkName,
  warmNetworkName,
} from './names.js';
export type { SandboxNames } from './names.js';
export { PIDS_LIMIT } from './limits.js';
export { egressNanoCpus, egressProxyEnv, onWarmNetwork, planSandbox, withAllowHosts, withCredentials, withEgressProxyEnv } from './sandbox-plan.js';
export { startRefusal } from './start-rules.js';
export type { SandboxPlan } from './sandbox-plan.js';
export { parseAddressPool, sandboxSubnet, subnetAddresses, subnetSlots } from './address-pool.js';
export type { AddressPool, SandboxSubnet } from './address-pool.js';
export { printableAsciiMap, serialiseAsciiBody } from './ascii-body.js';
export { checkAllowlistChange, checkSandboxSpec, DEFAULT_EGRESS_TIER, EGRESS_TIER_NAMES, type AllowlistChange } from './sandbox-spec.js';
export { TIERS, egressHostOf, egressHostOfLabels, meaningOfLabel, usesSharedNetwork } from './tiers.js';
export type { EgressHost, EgressIsolation, TierMeaning } from './tiers.js';
export {
  applicableSecrets,
  CA_BUNDLE_FILE,
  CA_CERT_ENV,
  CA_DIR,
  CA_FILE,
  inspectedEntries,
  placeholderFor,
  sandboxCredentials,
} from './credential-plan.js';
export type { SandboxCredentials, SecretMaterial } from './credential-plan.js';
export type { SecretConfig } from './credentials-config.js';
