/**
 * Configuration of the egress proxy from command-line flags and their environment twins (the
 * egress image uses only the environment). Parsed and validated once at start-up; any problem is
 * an error naming the flag or variable and what is wrong, and the proxy does not start.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { buildPolicy, parsePolicyText, PolicyError, type Policy, type PolicyProblem } from '../policy/index.js';
import { DEFAULT_LIMITS, type ProxyLimits } from './context.js';

export class ConfigError extends Error {
  readonly code = 'invalid_config';
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ConfigError';
  }
}

/** Each option: its flag, its environment variable, and what it means (also the --help text). */
export const OPTIONS = {
  policy: { env: 'EGRESS_POLICY_FILE', arg: 'FILE', help: 'policy file (JSON or YAML) with allowHosts and connectPorts' },
  'allow-hosts': { env: 'EGRESS_ALLOW_HOSTS', arg: 'LIST', help: 'comma-separated allowlist, instead of a policy file' },
  listen: { env: 'EGRESS_LISTEN', arg: 'HOST:PORT', help: 'address to listen on (default 127.0.0.1:3128)' },
  'dns-server': { env: 'EGRESS_DNS_SERVERS', arg: 'IP:PORT', help: 'DNS server to ask, repeatable (env: comma-separated); default: the system resolver' },
  'connect-ports': { env: 'ALLOW_CONNECT_PORTS', arg: 'LIST', help: 'comma-separated destination ports (overrides the policy file; default 443,80)' },
  'metrics-listen': { env: 'EGRESS_METRICS_LISTEN', arg: 'HOST:PORT', help: 'serve Prometheus metrics at /metrics on this address (off by default)' },
  'log-level': { env: 'EGRESS_LOG_LEVEL', arg: 'LEVEL', help: 'pino log level (default info)' },
  'max-connections': { env: 'EGRESS_MAX_CONNECTIONS', arg: 'N', help: `open client connections in total (default ${DEFAULT_LIMITS.maxConnections})` },
  'max-connections-per-client': { env: 'EGRESS_MAX_CONNECTIONS_PER_CLIENT', arg: 'N', help: `open connections per client address (default ${DEFAULT_LIMITS.maxConnectionsPerClient})` },
  'idle-timeout-ms': { env: 'EGRESS_IDLE_TIMEOUT_MS', arg: 'MS', help: `close tunnels idle this long (default ${DEFAULT_LIMITS.idleTimeoutMs})` },
  'max-tunnel-ms': { env: 'EGRESS_MAX_TUNNEL_MS', arg: 'MS', help: 'longest tunnel lifetime, 0 for none (default 0)' },
  'header-timeout-ms': { env: 'EGRESS_HEADER_TIMEOUT_MS', arg: 'MS', help: `time for a complete request head (default ${DEFAULT_LIMITS.headerTimeoutMs})` },
  'max-header-bytes': { env: 'EGRESS_MAX_HEADER_BYTES', arg: 'N', help: `largest request head (default ${DEFAULT_LIMITS.maxHeaderBytes})` },
  'dns-timeout-ms': { env: 'EGRESS_DNS_TIMEOUT_MS', arg: 'MS', help: `DNS deadline per request (default ${DEFAULT_LIMITS.dnsTimeoutMs})` },
  'require-sni': { env: 'EGRESS_REQUIRE_SNI', arg: 'true|false', help: 'refuse tunnels that do not open with a TLS server name (default false: allow and log)' },
  'connect-timeout-ms': { env: 'EGRESS_CONNECT_TIMEOUT_MS', arg: 'MS', help: `connect deadline per address (default ${DEFAULT_LIMITS.connectTimeoutMs})` },
} as const;

type OptionName = keyof typeof OPTIONS;

export const TEST_HOSTS_ENV = 'CAPYBARA_EGRESS_TEST_HOSTS';

export interface Endpoint {
  readonly host: string;
  readonly port: number;
}

export interface ProxyConfig {
  readonly listen: Endpoint;
  readonly metricsListen: Endpoint | undefined;
  readonly dnsServers: readonly string[];
  readonly logLevel: string;
  readonly limits: ProxyLimits;
  /** Where the policy came from, to re-read it on SIGHUP or change. */
  readonly policySource: { readonly kind: 'file'; readonly path: string } | { readonly kind: 'env'; readonly name: string };
  readonly connectPorts: readonly number[] | undefined;
  readonly testHosts: Readonly<Record<string, string | readonly string[]>> | undefined;
  readonly allowHosts: readonly string[] | undefined;
}

const Endpoint = z.string().transform((text, ctx): Endpoint => {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):([0-9]{1,5})$/.exec(text);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) {
    ctx.addIssue({ code: 'custom', message: `"${text}" is not HOST:PORT (IPv6 in brackets)` });
    return z.NEVER;
  }
  return { host: (m[1] ?? m[2]) as string, port };
});

const PortList = z.string().transform((text, ctx): number[] => {
  const parts = text.split(',').map((s) => s.trim()).filter(Boolean);
  const ports = parts.map(Number);
  const bad = parts.find((p) => !/^[1-9][0-9]{0,4}$/.test(p) || Number(p) > 65535);
  if (bad !== undefined || ports.length === 0) {
    ctx.addIssue({ code: 'custom', message: `"${bad ?? text}" is not a port list like 443,80` });
    return z.NEVER;
  }
  return ports;
});

const DnsServer = z.string().refine((s) => /^(?:[0-9.]+|\[[0-9a-fA-F:.]+\])(?::[0-9]{1,5})?$|^[0-9a-fA-F:]+$/.test(s), {
  message: 'expected IP, IP:PORT or [IPv6]:PORT',
});

const Bool = z.enum(['true', 'false'], { message: 'expected true or false' }).transform((v) => v === 'true');

const Count = z.string().regex(/^[0-9]+$/, 'expected a whole number').transform(Number);

const TestHosts = z
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

/** Reads one option: the flag wins over the environment variable. */
function pick(values: Record<string, string | string[] | boolean | undefined>, env: NodeJS.ProcessEnv, name: OptionName): { value: string; from: string } | undefined {
  const flag = values[name];
  if (typeof flag === 'string') return { value: flag, from: `--${name}` };
  if (Array.isArray(flag) && flag.length > 0) return { value: flag.join(','), from: `--${name}` };
  const fromEnv = env[OPTIONS[name].env];
  // An empty variable counts as unset, except the allowlist: set and empty, it allows nothing
  // (how the controller runs the proxy of a sandbox whose allowlist is empty).
  if (fromEnv === undefined || (fromEnv === '' && name !== 'allow-hosts')) return undefined;
  return { value: fromEnv, from: OPTIONS[name].env };
}

function parseWith<T>(schema: z.ZodType<T>, picked: { value: string; from: string }): T {
  const result = schema.safeParse(picked.value);
  if (!result.success) throw new ConfigError(`${picked.from}: ${result.error.issues.map((i) => i.message).join('; ')}`);
  return result.data;
}

export function usage(): string {
  const rows = Object.entries(OPTIONS).map(([name, o]) => `  --${name} ${o.arg}`.padEnd(42) + `${o.help}\n${''.padEnd(42)}env ${o.env}`);
  return [
    'usage: capybara-egress (--policy FILE | --allow-hosts LIST) [options]',
    '',
    'An HTTP forward proxy that lets clients reach only allowlisted host names, never private',
    'addresses. HTTPS by CONNECT, plain HTTP by absolute URL. SIGHUP re-reads the policy file.',
    '',
    ...rows,
    '  --help'.padEnd(42) + 'show this text',
    '',
    `Test pins (tests only): ${TEST_HOSTS_ENV}='{"host":"ip"}' pins names to addresses.`,
  ].join('\n');
}

/** Parses flags and environment. Throws ConfigError; returns undefined when --help was asked. */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): ProxyConfig | undefined {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    const options = Object.fromEntries(
      Object.keys(OPTIONS).map((name) => [name, { type: 'string' as const, multiple: name === 'dns-server' }]),
    );
    values = parseArgs({ args: [...argv], options: { ...options, help: { type: 'boolean' } }, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new ConfigError(`${(err as Error).message}\n\n${usage()}`);
  }
  if (values.help === true) return undefined;

  const get = (name: OptionName) => pick(values, env, name);
  const count = (name: OptionName, fallback: number): number => {
    const p = get(name);
    return p === undefined ? fallback : parseWith(Count, p);
  };
  const flagValue = (name: OptionName, fallback: boolean): boolean => {
    const p = get(name);
    return p === undefined ? fallback : parseWith(Bool, p);
  };

  const policyFile = get('policy');
  const allowHosts = get('allow-hosts');
  if (policyFile && allowHosts) {
    throw new ConfigError(`both ${policyFile.from} and ${allowHosts.from} are set: give the allowlist one way only`);
  }
  if (!policyFile && !allowHosts) {
    throw new ConfigError(`no policy: give --policy FILE (${OPTIONS.policy.env}) or --allow-hosts LIST (${OPTIONS['allow-hosts'].env})`);
  }

  const listen = get('listen');
  const metrics = get('metrics-listen');
  const dns = get('dns-server');
  const ports = get('connect-ports');
  const testHosts = env[TEST_HOSTS_ENV];
  return Object.freeze({
    listen: listen ? parseWith(Endpoint, listen) : { host: '127.0.0.1', port: 3128 },
    metricsListen: metrics ? parseWith(Endpoint, metrics) : undefined,
    dnsServers: dns ? dns.value.split(',').map((s) => s.trim()).filter(Boolean).map((s) => parseWith(DnsServer, { value: s, from: dns.from })) : [],
    logLevel: get('log-level')?.value ?? 'info',
    limits: Object.freeze({
      maxConnections: count('max-connections', DEFAULT_LIMITS.maxConnections),
      maxConnectionsPerClient: count('max-connections-per-client', DEFAULT_LIMITS.maxConnectionsPerClient),
      idleTimeoutMs: count('idle-timeout-ms', DEFAULT_LIMITS.idleTimeoutMs),
      maxTunnelMs: count('max-tunnel-ms', DEFAULT_LIMITS.maxTunnelMs),
      headerTimeoutMs: count('header-timeout-ms', DEFAULT_LIMITS.headerTimeoutMs),
      maxHeaderBytes: count('max-header-bytes', DEFAULT_LIMITS.maxHeaderBytes),
      dnsTimeoutMs: count('dns-timeout-ms', DEFAULT_LIMITS.dnsTimeoutMs),
      connectTimeoutMs: count('connect-timeout-ms', DEFAULT_LIMITS.connectTimeoutMs),
      requireSni: flagValue('require-sni', DEFAULT_LIMITS.requireSni),
    }),
    policySource: policyFile ? { kind: 'file' as const, path: policyFile.value } : { kind: 'env' as const, name: allowHosts?.from ?? '' },
    connectPorts: ports ? parseWith(PortList, ports) : undefined,
    testHosts: testHosts ? parseWith(TestHosts, { value: testHosts, from: TEST_HOSTS_ENV }) : undefined,
    allowHosts: allowHosts ? allowHosts.value.split(',').map((s) => s.trim()).filter(Boolean) : undefined,
  });
}

/**
 * Builds the policy from the configured source. `readFile` is the only I/O, so a reload runs the
 * same code as start-up. Throws PolicyError naming the file (or variable), path and problem.
 */
export function loadPolicy(config: ProxyConfig, readFile: (path: string) => string): Policy {
  const source = config.policySource;
  let allowHosts: readonly string[];
  let filePorts: readonly number[] | undefined;
  const sourceName = source.kind === 'file' ? source.path : source.name;
  if (source.kind === 'file') {
    let text: string;
    try {
      text = readFile(source.path);
    } catch (err) {
      throw new PolicyError(source.path, [{ path: '', message: `cannot read the file (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})` }], { cause: err });
    }
    const file = parsePolicyText(text, source.path);
    allowHosts = file.allowHosts;
    filePorts = file.connectPorts;
  } else {
    allowHosts = config.allowHosts ?? [];
  }
  const built = buildPolicy({
    allowHosts,
    connectPorts: config.connectPorts ?? filePorts,
    ...(config.testHosts ? { testHosts: config.testHosts } : {}),
  });
  if (built.ok) return built.policy;
  // Name the variable a problem came from when it did not come from the file.
  const bySource = new Map<string, PolicyProblem[]>();
  for (const p of built.problems) {
    const from = p.path.startsWith('testHosts') ? TEST_HOSTS_ENV : p.path.startsWith('connectPorts') && config.connectPorts ? 'ALLOW_CONNECT_PORTS' : sourceName;
    bySource.set(from, [...(bySource.get(from) ?? []), p]);
  }
  const [first] = bySource;
  throw new PolicyError(first?.[0] ?? sourceName, first?.[1] ?? built.problems);
}
