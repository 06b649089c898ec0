/**
 * The proxy's limits, as one zod schema: the type, the defaults and the descriptions (also the
 * --help text) come from here. Every limit has a safe default.
 */
import { z } from 'zod';

const whole = (min: number) => z.number().int().min(min);

export const LimitsSchema = z.object({
  maxHeaderBytes: whole(1024).default(16 * 1024).describe('largest request head in bytes (then 431)'),
  headerTimeoutMs: whole(1).default(10_000).describe('time for a complete request head (then 408)'),
  idleTimeoutMs: whole(1).default(300_000).describe('close a tunnel or connection with no traffic either way for this long'),
  maxTunnelMs: whole(0).default(0).describe('longest tunnel lifetime, 0 for none'),
  helloTimeoutMs: whole(1).default(10_000).describe('time for the complete TLS ClientHello of a tls tunnel (then the tunnel is refused)'),
  dnsTimeoutMs: whole(1).default(5_000).describe('DNS deadline per request (then 504)'),
  connectTimeoutMs: whole(1).default(10_000).describe('connect deadline per upstream address'),
  maxConnections: whole(1).default(16_384).describe('open client connections in total (then 503)'),
  maxConnectionsPerClient: whole(1).default(4_096).describe('open client connections from one client address (then 429)'),
});

export type ProxyLimits = Readonly<z.output<typeof LimitsSchema>>;

export const DEFAULT_LIMITS: ProxyLimits = Object.freeze(LimitsSchema.parse({}));
