/** One client connection and what handlers share: the connection object, the request pipeline, the health check, the proxy context. */
export * from './admission.js';
export * from './connection.js';
export * from './context.js';
export * from './health-check.js';
export * from './pipeline.js';
export * from './identity.js';
