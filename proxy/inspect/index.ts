/** TLS interception of inspected hosts: the leaf certificates the egress shows clients, and where the deployment CA is kept. */
export { DEFAULT_LEAF_LIFETIME_MS, DEFAULT_MAX_LEAVES, LeafCertificates, type LeafIssuer, type LeafOptions } from './leaf-certificates.js';
export { DEFAULT_CA_DIR, loadAuthority, rotateAuthority, type CaSource } from './ca-store.js';
export { caSource } from './ca-source.js';
export { runCa } from './ca-command.js';
export { loadInspection, readUpstreamCa, type Inspection, type UpstreamCaSource } from './inspection-load.js';
