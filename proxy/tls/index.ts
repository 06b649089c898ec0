/** TLS as a tunnel sees it: the strict ClientHello reader, the server's first answer, and the guard of a `tls` tunnel. */
export * from './client-hello.js';
export * from './growable-buffer.js';
export * from './server-hello.js';
export * from './tls-guard.js';
