/** Transparent mode: its listeners, which ports, and routing a connection by its ClientHello. */
export * from './transparent.js';
export * from './transparent-ports.js';
export * from './transparent-tls.js';
