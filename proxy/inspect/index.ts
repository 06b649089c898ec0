/** TLS interception of inspected hosts: the leaf certificates the egress shows clients, and where the deployment CA is kept. */
export { DEFAULT_LEAF_LIFETIME_MS, DEFAULT_MAX_LEAVES, LeafCertificates, type LeafIssuer, type LeafOptions } from './leaf-certificates.js';
