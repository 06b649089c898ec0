/** Inspected hosts: TLS terminated with a leaf of the deployment CA (each request inside read and decided), the leaves, and where the deployment CA is kept. */
export * from './inspect.js';
export { DEFAULT_LEAF_LIFETIME_MS, DEFAULT_MAX_LEAVES, LeafCertificates, type LeafOptions } from './leaf-certificates.js';
export { DEFAULT_CA_DIR, loadAuthority, rotateAuthority, type CaSource } from './ca-store.js';
export { caSource } from './ca-source.js';
export { runCa } from './ca-command.js';
export { loadInspection, MAX_UPSTREAM_CA_BYTES, readUpstreamCa, type LoadedInspection, type UpstreamCaSource } from './inspection-load.js';
