/**
 * Turns the configured endpoint into docker-modem connection options. mTLS material comes
 * only from a mounted directory (never from environment variables, which leak into child
 * processes and crash reports).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../spec/index.js';

export type EndpointAddress =
  | { readonly kind: 'unix'; readonly socketPath: string }
  | { readonly kind: 'tcp'; readonly host: string; readonly port: number };

export function parseEndpoint(endpoint: string): EndpointAddress {
  if (endpoint.startsWith('unix://')) {
    const socketPath = endpoint.slice('unix://'.length);
    if (!socketPath.startsWith('/')) throw new SandboxError('invalid_config', `endpoint ${endpoint}: a unix socket path must be absolute (unix:///path).`);
    return { kind: 'unix', socketPath };
  }
  const match = /^tcp:\/\/(\[[^\]]+\]|[^:/]+):(\d{1,5})\/?$/.exec(endpoint);
  const port = Number(match?.[2]);
  if (match === null || !(port >= 1 && port <= 65535)) {
    throw new SandboxError('invalid_config', `endpoint ${JSON.stringify(endpoint)} is not tcp://host:port (port 1-65535) or unix:///path.`);
  }
  const host = (match[1] ?? '').replace(/^\[(.*)\]$/, '$1');
  return { kind: 'tcp', host, port };
}

export interface ModemOptions {
  socketPath?: string;
  host?: string;
  port?: number;
  protocol?: 'http' | 'https';
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

export function modemOptions(endpoint: string, tlsCertDir: string | undefined): ModemOptions {
  const address = parseEndpoint(endpoint);
  if (address.kind === 'unix') {
    if (tlsCertDir !== undefined) throw new SandboxError('invalid_config', 'tlsCertDir applies only to a tcp:// endpoint.');
    return { socketPath: address.socketPath };
  }
  if (tlsCertDir === undefined) return { host: address.host, port: address.port, protocol: 'http' };
  const read = (file: string): Buffer => {
    try {
      return readFileSync(join(tlsCertDir, file));
    } catch (err) {
      throw new SandboxError('invalid_config', `Cannot read ${file} from tlsCertDir ${tlsCertDir}: mount the engine client certificates there.`, { cause: err });
    }
  };
  return { host: address.host, port: address.port, protocol: 'https', ca: read('ca.pem'), cert: read('cert.pem'), key: read('key.pem') };
}
