/** A shared egress proxy's tenants: identity by sandbox network, their policies, their registrations. */
export * from './tenant-policy.js';
export * from './tenants.js';
export * from './slot-directory.js';
export * from './tenant-dns.js';
