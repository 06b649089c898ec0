/**
 * The proxy's own health check, recognised in the raw bytes of a connection's first read, for the
 * one case where Node's HTTP parser does not get the connection: the memory budget is full. Then
 * the health check is still answered (a container engine or Kubernetes that saw it fail would
 * restart the proxy and end every tunnel, which is what the budget exists to prevent), and
 * nothing else is. Strict: one complete head of `GET` or `HEAD` for exactly the health path, and
 * nothing after it; anything else is no health check.
 */
import { EGRESS_HEALTH_PATH, EGRESS_SANDBOX_HEADER, sandboxHealthValue } from '../../common/index.js';
import type { SandboxOf } from '../record/index.js';

/** The method of a first read that is exactly one health-check head, else undefined. */
export function healthCheckHead(chunk: Buffer): 'GET' | 'HEAD' | undefined {
  const end = chunk.indexOf('\r\n\r\n');
  if (end === -1 || end + 4 !== chunk.length) return undefined;
  const line = chunk.toString('latin1', 0, chunk.indexOf('\r\n'));
  if (line === `GET ${EGRESS_HEALTH_PATH} HTTP/1.1` || line === `GET ${EGRESS_HEALTH_PATH} HTTP/1.0`) return 'GET';
  if (line === `HEAD ${EGRESS_HEALTH_PATH} HTTP/1.1` || line === `HEAD ${EGRESS_HEALTH_PATH} HTTP/1.0`) return 'HEAD';
  return undefined;
}

/**
 * The field a health answer carries for a client of a registered sandbox network (on a shared
 * proxy): its sandbox and the registration it was accepted under. None for anyone else.
 */
export function sandboxHealthField(who: SandboxOf | undefined): Record<string, string> {
  if (who?.sandbox === undefined || who.lifecycle === undefined) return {};
  return { [EGRESS_SANDBOX_HEADER]: sandboxHealthValue(who.sandbox, who.lifecycle) };
}

/** The health check's answer, on a connection the proxy closes after it; `who`: sandboxHealthField's. */
export function healthAnswer(method: 'GET' | 'HEAD', who?: SandboxOf): string {
  const fields = Object.entries(sandboxHealthField(who)).map(([name, value]) => `${name}: ${value}\r\n`).join('');
  return `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n${fields}Connection: close\r\n\r\n${method === 'GET' ? 'ok\n' : ''}`;
}
