/** Inspected connections: TLS terminated with a leaf of the deployment CA, each request inside read and decided. */
export * from './inspect.js';
