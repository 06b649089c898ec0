/** The egress proxy: sockets, HTTP and tunnels around the pure decisions of policy/. */
export { createEgressProxy, type EgressProxy, type EgressProxyOptions } from './server.js';
export { DEFAULT_LIMITS, type ProxyLimits } from './limits.js';
export { createLookup, limitLookups, MAX_LOOKUPS_IN_FLIGHT, type ClientLookup, type LookupOptions, type LookupWork } from './dns.js';
export { createLogger } from './log.js';
export { defaultConnect, type Connect } from './dial.js';
export { parseAbsoluteUrl, parseConnectTarget, type ParsedTarget } from './authority.js';
export { ClientHelloReader, MAX_HELLO_BYTES, MAX_HELLO_RECORDS, parseClientHello, type HelloResult } from './client-hello.js';
export { checkRequestHead, type BodyFraming, type RequestHead } from './request-head.js';
export { checkResponseHead, type ResponseHead } from './response-head.js';
export { readConnectHead, type ConnectHead } from './connect-head.js';
export { TlsGuard, MAX_WATCH_BYTES, type GuardStep, type GuardVerdict } from './tls-guard.js';
export { ACCEPT_BYTES, MemoryBudget } from './memory-budget.js';
