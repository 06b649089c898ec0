/** Reaching upstreams: dialling pinned addresses, pooled HTTP connections, and the proxy's own addresses, never dialled. */
export * from './dial.js';
export * from './h1-connection.js';
export * from './h1-pool.js';
export * from './h1-request.js';
export * from './own-address.js';
export * from './own-buffer.js';
export * from './own-listeners.js';
export * from './tls-dial.js';
export * from './upstream-pools.js';
