/** CONNECT and transparent TLS tunnels: decide, dial, splice with backpressure, watch a `tls` tunnel's ClientHello. */
export * from './relay.js';
export * from './splice.js';
export * from './tls-watch.js';
export * from './tunnel.js';
