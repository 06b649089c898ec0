/** DNS: pinned lookups within each client's share, and transparent mode's DNS responder. */
export * from './dns.js';
export * from './dns-answer.js';
export * from './dns-responder.js';
export { SANDBOX_UDP_SHED_AFTER } from './dns-udp.js';
export { TcpSlots } from './dns-tcp.js';
