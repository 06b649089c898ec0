/** CONNECT and transparent TLS tunnels: decide, dial, splice with backpressure. */
export * from './tunnel.js';
