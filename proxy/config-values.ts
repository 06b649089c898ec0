/**
 * The values of the egress proxy's options, each a zod schema from the text given (a flag, or its
 * environment twin) to what the proxy runs with, with a message that says what was expected.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { z } from 'zod';
import { POLICY_MODES } from '../policy/index.js';

export const Endpoint = z.string().transform((text, ctx) => {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):([0-9]+)$/.exec(text);
  if (!m) {
    ctx.addIssue({ code: 'custom', message: `"${text}" is not HOST:PORT (IPv6 in brackets)` });
    return z.NEVER;
  }
  const port = Number(m[3]);
  if (port > 65535 || (m[3] ?? '').length > 5) {
    ctx.addIssue({ code: 'custom', message: `"${text}": port ${m[3] ?? ''} is out of range (0-65535; 0 picks a free one)` });
    return z.NEVER;
  }
  return Object.freeze({ host: (m[1] ?? m[2]) as string, port });
});

export const PortList = z.string().transform((text, ctx): number[] => {
  const parts = text.split(',').map((s) => s.trim()).filter(Boolean);
  const bad = parts.find((p) => !/^[1-9][0-9]{0,4}$/.test(p) || Number(p) > 65535);
  if (bad !== undefined || parts.length === 0) {
    ctx.addIssue({ code: 'custom', message: `"${bad ?? text}" is not a port list like 443,80` });
    return z.NEVER;
  }
  return parts.map(Number);
});

/** One DNS server as c-ares takes it: an address, with a port in 1-65535 if one is given. */
function dnsServerProblem(text: string): string | undefined {
  const bracketed = /^\[([^\]]+)\](?::([0-9]{1,5}))?$/.exec(text);
  const v4 = /^([0-9.]+)(?::([0-9]{1,5}))?$/.exec(text);
  const [address, port] = bracketed ? [bracketed[1]!, bracketed[2]] : v4 ? [v4[1]!, v4[2]] : [text, undefined];
  const valid = bracketed ? isIPv6(address) : v4 ? isIPv4(address) : isIPv6(address);
  if (!valid) return `"${text}" is not IP, IP:PORT or [IPv6]:PORT (a bare IPv6 address takes no port)`;
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return `"${text}" has a port outside 1-65535`;
  return undefined;
}

export const DnsServers = z
  .string()
  .transform((text) => text.split(',').map((s) => s.trim()).filter(Boolean))
  .pipe(z.array(z.string().superRefine((s, ctx) => {
    const problem = dnsServerProblem(s);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  })));

export const Ipv4 = z.string().refine((text) => isIPv4(text), { message: 'expected an IPv4 address (transparent mode is IPv4 only)' });

/** An address a workload can connect to: not 0.0.0.0, broadcast or multicast. */
export const AnswerAddress = Ipv4.refine((text) => text !== '0.0.0.0' && Number(text.split('.')[0]) < 224, { message: 'expected a unicast IPv4 address a workload can connect to' });

export const PortMap = z.string().transform((text, ctx): ReadonlyMap<number, number> => {
  const map = new Map<number, number>();
  const port = (p: string): number | undefined => (/^[1-9][0-9]{0,4}$/.test(p) && Number(p) <= 65535 ? Number(p) : undefined);
  for (const item of text.split(',').map((s) => s.trim()).filter(Boolean)) {
    const [dialled, listen, extra] = item.split('=').map((p) => port(p.trim()));
    if (dialled === undefined || listen === undefined || extra !== undefined || item.split('=').length !== 2) {
      ctx.addIssue({ code: 'custom', message: `"${item}" is not DIALLED=LISTEN, two ports like 443=8443` });
      return z.NEVER;
    }
    if (map.has(dialled)) {
      ctx.addIssue({ code: 'custom', message: `port ${dialled} is mapped twice` });
      return z.NEVER;
    }
    map.set(dialled, listen);
  }
  return map;
});

export const Bool = z.enum(['true', 'false'], { message: 'expected true or false' }).transform((v) => v === 'true');

export const Count = z.string().regex(/^[0-9]{1,15}$/, 'expected a whole number').transform(Number);

export const LogLevel = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], { message: 'expected fatal, error, warn, info, debug, trace or silent' });

export const TunnelMode = z.enum(['tls', 'opaque'], { message: 'expected tls or opaque' });

export const Mode = z.enum(POLICY_MODES, { message: 'expected enforce or report' });

export const TestHosts = z
  .string()
  .transform((text, ctx) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      ctx.addIssue({ code: 'custom', message: 'not valid JSON' });
      return z.NEVER;
    }
  })
  .pipe(z.record(z.string(), z.union([z.string(), z.array(z.string()).min(1)])));

/** Longest refusal hint: it goes into every refusal body of a host off the allowlist. */
export const REFUSAL_HINT_MAX = 300;

/** A refusal hint: one line of printable ASCII (it goes into a response body as it is). */
export const RefusalHint = z
  .string()
  .refine((text) => /^[\x20-\x7e]+$/.test(text) && text.trim() === text, { message: 'expected one line of printable ASCII, without leading or trailing spaces' })
  .refine((text) => text.length <= REFUSAL_HINT_MAX, { message: `expected at most ${REFUSAL_HINT_MAX} characters` });
