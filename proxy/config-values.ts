/**
 * The egress proxy's options (each flag, its environment twin and its help, and the usage text),
 * and their values, each a zod schema from the text given to what the proxy runs with, with a
 * message that says what was expected.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { z } from 'zod';
import { EGRESS_ENV, EGRESS_PROXY_PORT } from '../common/index.js';
import { POLICY_MODES } from '../policy/index.js';
import { DEFAULT_LIMITS, LimitsSchema, type ProxyLimits } from './budget/index.js';

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

const limitHelp = (key: keyof ProxyLimits): string => `${LimitsSchema.shape[key].description ?? key} (default ${DEFAULT_LIMITS[key]})`;

/** Each option: its flag, its environment variable, and what it means (also the --help text). */
export const OPTIONS = {
  policy: { env: EGRESS_ENV.policyFile, arg: 'FILE', help: 'policy file (JSON or YAML) with allowHosts and connectPorts' },
  'tenants-dir': {
    env: EGRESS_ENV.tenantsDir,
    arg: 'DIR',
    help: 'serve many sandboxes: each connection is decided by the policy of the registered sandbox network (DIR/<slot>.json) that holds both its addresses, and refused unknown_client when none does; changes are in force within a second (instead of --policy, --policy-json and --allow-hosts)',
  },
  'policy-json': { env: EGRESS_ENV.policyJson, arg: 'TEXT', help: 'the policy as one line of JSON (the policy file\'s schema), instead of a policy file (how the sandbox controller passes a per-sandbox policy)' },
  'allow-hosts': { env: EGRESS_ENV.allowHosts, arg: 'LIST', help: 'comma-separated allowlist, instead of a policy file' },
  listen: { env: EGRESS_ENV.listen, arg: 'HOST:PORT', help: `address to listen on (default 127.0.0.1:${EGRESS_PROXY_PORT})` },
  'dns-server': { env: EGRESS_ENV.dnsServers, arg: 'IP:PORT', help: 'DNS server to ask, repeatable (env: comma-separated); default: the system resolver' },
  'connect-ports': { env: EGRESS_ENV.connectPorts, arg: 'LIST', help: 'comma-separated destination ports (overrides the policy file; default 443,80)' },
  'metrics-listen': { env: EGRESS_ENV.metricsListen, arg: 'HOST:PORT', help: 'serve Prometheus metrics at /metrics on this address (off by default)' },
  'log-level': { env: EGRESS_ENV.logLevel, arg: 'LEVEL', help: 'pino log level: fatal, error, warn, info, debug, trace or silent (default info)' },
  'tunnel-default': { env: EGRESS_ENV.tunnelDefault, arg: 'tls|opaque', help: 'tunnel mode of allowlist entries that name none (default tls: a TLS ClientHello naming the CONNECT host must come first)' },
  'require-sni': { env: EGRESS_ENV.requireSni, arg: 'true|false', help: 'true: refuse opaque entries, so every tunnel must start with TLS naming the CONNECT host (default false: the policy decides)' },
  'max-connections': { env: EGRESS_ENV.maxConnections, arg: 'N', help: limitHelp('maxConnections') },
  'max-connections-per-client': { env: EGRESS_ENV.maxConnectionsPerClient, arg: 'N', help: limitHelp('maxConnectionsPerClient') },
  'idle-timeout-ms': { env: EGRESS_ENV.idleTimeoutMs, arg: 'MS', help: limitHelp('idleTimeoutMs') },
  'max-tunnel-ms': { env: EGRESS_ENV.maxTunnelMs, arg: 'MS', help: limitHelp('maxTunnelMs') },
  'header-timeout-ms': { env: EGRESS_ENV.headerTimeoutMs, arg: 'MS', help: limitHelp('headerTimeoutMs') },
  'tls-hello-timeout-ms': { env: EGRESS_ENV.helloTimeoutMs, arg: 'MS', help: limitHelp('helloTimeoutMs') },
  'max-header-bytes': { env: EGRESS_ENV.maxHeaderBytes, arg: 'N', help: limitHelp('maxHeaderBytes') },
  'dns-timeout-ms': { env: EGRESS_ENV.dnsTimeoutMs, arg: 'MS', help: limitHelp('dnsTimeoutMs') },
  'connect-timeout-ms': { env: EGRESS_ENV.connectTimeoutMs, arg: 'MS', help: limitHelp('connectTimeoutMs') },
  'memory-limit-mb': {
    env: EGRESS_ENV.memoryLimitMb,
    arg: 'MIB',
    help: 'memory the proxy may use, when lower than its cgroup\'s limit (default: the cgroup\'s memory.max or memory.limit_in_bytes, else the machine); sizes the budget of bytes held before a verdict',
  },
  'transparent-listen': { env: EGRESS_ENV.transparentListen, arg: 'IP', help: 'transparent mode: answer DNS (53) and take TLS and HTTP connections (the connect ports) on this IPv4 address, the one workloads reach the proxy by (default off)' },
  'transparent-answer': { env: EGRESS_ENV.transparentAnswer, arg: 'IP', help: 'the IPv4 address allowlisted names resolve to in transparent mode, when workloads reach the proxy by another than --transparent-listen (a Kubernetes Service address); needed with 0.0.0.0' },
  'transparent-port-map': { env: EGRESS_ENV.transparentPortMap, arg: 'LIST', help: 'comma-separated DIALLED=LISTEN pairs for a platform that forwards ports (53=5353,443=8443): listen on LISTEN, decide on DIALLED; other ports listen on themselves' },
  mode: { env: EGRESS_ENV.mode, arg: 'enforce|report', help: 'report: allow what only allowHosts or connectPorts refuse, and log it would_deny, to learn an allowlist (overrides the policy file\'s mode; default enforce); not a boundary' },
  'ca-dir': { env: EGRESS_ENV.caDir, arg: 'DIR', help: `the deployment CA of inspected hosts (ca.crt, ca.key), made on first use in a directory of the proxy user's own, mode 0700; read only when the policy inspects (${EGRESS_ENV.caInline} instead holds the CA itself; default /var/lib/capybara-egress/ca)` },
  'upstream-ca': { env: EGRESS_ENV.upstreamCa, arg: 'FILE', help: 'PEM bundle the upstreams of inspected hosts are verified against (default /etc/ssl/certs/ca-certificates.crt when readable, else Node\'s roots)' },
  'refusal-hint': { env: EGRESS_ENV.refusalHint, arg: 'TEXT', help: `what the refusal of a host off the allowlist tells the client to do, instead of "add the host name to allowHosts" (printable ASCII, at most ${REFUSAL_HINT_MAX} characters)` },
} as const;

export type OptionName = keyof typeof OPTIONS;

/** Every variable the proxy reads by a fixed name (a secret's placeholders and values go by the policy). */
const VARIABLES: readonly string[] = [...Object.values(OPTIONS).map((o) => o.env), EGRESS_ENV.caInline, EGRESS_ENV.testHosts];

/** Edits (insert, delete, substitute) from one name to the other, up to `most` + 1. */
function editsBetween(a: string, b: string, most: number): number {
  if (Math.abs(a.length - b.length) > most) return most + 1;
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length]!;
}

/**
 * A variable set in `env` whose name is a slip of one the proxy reads (another case, an
 * underscore more or less, up to two letters wrong: EGRESS_REQUIRE_SNl, EGRESS_DNS_SERVER), with
 * the one meant. Such a setting would otherwise be ignored without a word, and the proxy run on
 * the default it was set to change (no SNI requirement, the system resolver).
 */
export function misspeltVariable(env: NodeJS.ProcessEnv): { readonly name: string; readonly meant: string } | undefined {
  const squash = (name: string): string => name.toUpperCase().replace(/[_-]/g, '');
  for (const name of Object.keys(env)) {
    if (env[name] === undefined || VARIABLES.includes(name) || name.startsWith('EGRESS_PLACEHOLDER_')) continue;
    const meant = VARIABLES.find((known) => editsBetween(squash(name), squash(known), 2) <= 2);
    if (meant !== undefined) return { name, meant };
  }
  return undefined;
}

export const TEST_HOSTS_ENV = EGRESS_ENV.testHosts;

export function usage(): string {
  const rows = Object.entries(OPTIONS).map(([name, o]) => `  --${name} ${o.arg}`.padEnd(42) + `${o.help}\n${''.padEnd(42)}env ${o.env}`);
  return [
    'usage: capybara-egress (--policy FILE | --policy-json TEXT | --allow-hosts LIST) [options]',
    '       capybara-egress check FILE [options]    (the same as --policy FILE --check)',
    '       capybara-egress report LOGFILE|-        (the allowHosts policy a run needed, from the proxy\'s JSON log)',
    '       capybara-egress ca [--ca-dir DIR] [--rotate] [--inline]   (the deployment CA: see capybara-egress ca --help)',
    '',
    'An HTTP forward proxy that lets clients reach only allowlisted host names, never private',
    'addresses. HTTPS by CONNECT, plain HTTP by absolute URL. SIGHUP re-reads the policy file.',
    '',
    ...rows,
    '  --check'.padEnd(42) + 'validate the options and the policy, print what it allows, and exit\n' +
      ''.padEnd(42) + '(0 valid, 1 an invalid policy, 2 a usage error); binds no port',
    '  --version'.padEnd(42) + 'print the version (alone)',
    '  --help'.padEnd(42) + 'show this text',
    '',
    `The deployment CA may instead be given whole in ${EGRESS_ENV.caInline} (capybara-egress ca --inline; never a flag, which ps would show).`,
    `Test pins (tests only): ${TEST_HOSTS_ENV}='{"host":"ip"}' pins names to addresses.`,
  ].join('\n');
}
