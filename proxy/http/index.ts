/** HTTP: CONNECT heads, absolute-form and transparent targets, request and response heads judged, and forwarding (plain HTTP with undici). */
export * from './authority.js';
export * from './connect-head.js';
export * from './exchange.js';
export * from './forward.js';
export * from './inspected-target.js';
export * from './request-head.js';
export * from './response-head.js';
export * from './transparent-http.js';
export * from './upstream-failure.js';
