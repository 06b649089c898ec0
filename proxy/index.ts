/** The egress proxy: sockets, HTTP and tunnels around the pure decisions of policy/. */
export { createEgressProxy, type EgressProxy, type EgressProxyOptions } from './server.js';
export type { Inspection, LeafIssuer } from './admission/index.js';
export { DEFAULT_LIMITS, MAX_LOOKUPS_IN_FLIGHT, type ProxyLimits } from './budget/index.js';
export { createLookup, limitLookups, type ClientLookup, type LookupOptions, type LookupWork } from './dns/index.js';
export { createLogger } from './record/index.js';
export { defaultConnect, type Connect } from './upstream/index.js';
export { parseAbsoluteUrl, parseConnectTarget, type ParsedTarget } from './http/index.js';
export { ClientHelloReader, MAX_HELLO_BYTES, MAX_HELLO_RECORDS, parseClientHello, type HelloResult } from './tls/index.js';
export { checkRequestHead, type BodyFraming, type RequestHead } from './http/index.js';
export { checkResponseHead, type ResponseHead } from './http/index.js';
export { readConnectHead, type ConnectHead } from './http/index.js';
export { TlsGuard, MAX_WATCH_BYTES, type GuardStep, type GuardVerdict } from './tls/index.js';
export { ACCEPT_BYTES, MemoryBudget } from './budget/index.js';
