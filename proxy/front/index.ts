/** The front of the proxy: a connection's first bytes, Node's HTTP server and its events, and the fail-closed handlers they hand requests to. */
export * from './first-bytes.js';
export * from './handlers.js';
export * from './http-events.js';
