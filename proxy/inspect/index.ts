/** TLS interception of inspected hosts: the leaf certificates the egress shows clients, and where the deployment CA is kept. */
export { DEFAULT_LEAF_LIFETIME_MS, DEFAULT_MAX_LEAVES, LeafCertificates, type LeafIssuer, type LeafOptions } from './leaf-certificates.js';
export { CA_CERT_FILE, CA_KEY_FILE, CaStoreError, DEFAULT_CA_DIR, loadAuthority, rotateAuthority, type CaSource } from './ca-store.js';
export { caSource } from './ca-source.js';
export { CA_USAGE, runCa } from './ca-command.js';
export { loadInspection, readUpstreamCa, SYSTEM_CA_BUNDLE, type Inspection, type UpstreamCaSource } from './inspection-load.js';
