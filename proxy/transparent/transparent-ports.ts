/**
 * Which listeners transparent mode runs, from the connect ports at start and the operator's port
 * map. Pure. DNS is served on 53; HTTP, routed by its Host header, on 80 when 80 is a connect
 * port; every other connect port is TLS, routed by its ClientHello's server name (a client that
 * speaks plain HTTP to 8080 is refused: only 80 is read as HTTP). Each listens on the port the
 * map gives it, else on the port a client dials: a platform that forwards 443 to 8443 (a
 * Kubernetes Service) maps `443=8443`, and the proxy still decides on 443, the port the client
 * dialled.
 */
import { HTTP_PORT } from '../http/index.js';

export const DNS_PORT = 53;

export type TransparentKind = 'dns' | 'tls' | 'http';

export interface TransparentPort {
  readonly kind: TransparentKind;
  /** The port a client dials: what the policy's port check sees. */
  readonly dialled: number;
  /** The port the proxy listens on. */
  readonly listen: number;
}

export type TransparentPlan = { readonly ok: true; readonly ports: readonly TransparentPort[] } | { readonly ok: false; readonly problem: string };

/** `portMap`: dialled port → listening port. */
export function planTransparentPorts(connectPorts: Iterable<number>, portMap: ReadonlyMap<number, number>): TransparentPlan {
  const served = [DNS_PORT, ...[...new Set(connectPorts)].filter((p) => p !== DNS_PORT).sort((a, b) => a - b)];
  for (const dialled of portMap.keys()) {
    if (!served.includes(dialled)) return { ok: false, problem: `maps port ${dialled}, which is neither ${DNS_PORT} (DNS) nor a connect port (${served.slice(1).join(',')})` };
  }
  const ports = served.map((dialled): TransparentPort => ({
    kind: dialled === DNS_PORT ? 'dns' : dialled === HTTP_PORT ? 'http' : 'tls',
    dialled,
    listen: portMap.get(dialled) ?? dialled,
  }));
  const seen = new Map<number, number>();
  for (const p of ports) {
    const other = seen.get(p.listen);
    if (other !== undefined) return { ok: false, problem: `ports ${other} and ${p.dialled} would both listen on ${p.listen}` };
    seen.set(p.listen, p.dialled);
  }
  return { ok: true, ports };
}
