/** The policy module: pure decisions about names, addresses and allowlists. No I/O here. */
export { REASONS, isReason, type Reason } from './reason.js';
export { parseHostName, type HostParse } from './host-name.js';
export { parseHostPattern, compileAllowlist, type Allowlist, type HostPattern, type TunnelMode } from './host-pattern.js';
export { classifyAddress, type AddressVerdict, type AddressClassName } from './address-class.js';
export { buildPolicy, DEFAULT_CONNECT_PORTS, POLICY_MODES, type PolicyMode, type AllowEntry, type Policy, type PolicyInput, type PolicyProblem } from './policy.js';
export { parsePolicyText, placeProblems, PolicyError, PolicyFileSchema, type PolicyFile } from './policy-file.js';
export { parseSecretBindings, type PlacedBinding, type SecretBinding, type SecretEntry, type SecretSource } from './secret-binding.js';
export {
  applySecrets,
  createSecretSet,
  screenHost,
  screenTarget,
  secretLabel,
  type LoadedSecret,
  type SecretRefusal,
  type SecretRequest,
  type SecretSet,
  type SecretsApplied,
  type SecretTarget,
} from './secrets.js';
export { normaliseRequestPath } from './request-path.js';
export { describeRules, HTTP_TOKEN, type RequestRules } from './request-rules.js';
export {
  checkTarget,
  checkRequest,
  checkAddresses,
  MAX_PINNED_ADDRESSES,
  decide,
  recheckTarget,
  repinTarget,
  resolveTarget,
  type Decision,
  type Allowed,
  type AllowedTarget,
  type Denial,
  type Lookup,
  type LookupOutcome,
  type OpenTarget,
  type OwnListener,
  type WouldDeny,
} from './decision.js';
export {
  TenantTable,
  ipv4Number,
  parseSlotEnvelope,
  parseSlotFile,
  parseSlotPolicy,
  parseSubnet,
  subnetHolds,
  subnetsOverlap,
  type SlotEnvelope,
  type SlotFile,
  type Subnet,
  type TenantLookup,
  type TenantRegistration,
} from './tenants.js';
