/**
 * Configuration of the egress proxy from command-line flags and their environment twins (the
 * egress image uses only the environment). One zod schema parses and validates everything once at
 * start-up, and `ProxyConfig` is its output type; any problem is an error naming the flag or
 * variable and what is wrong, and the proxy does not start.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { CodedError, decodeAllowHosts, EGRESS_ENV, EGRESS_PROXY_PORT } from '../common/index.js';
import { buildPolicy, describeRules, parsePolicyText, placeProblems, PolicyError, type AllowEntry, type Policy, type PolicyMode, type PolicyProblem } from '../policy/index.js';
import { DEFAULT_LIMITS, LimitsSchema, type ProxyLimits } from './budget/index.js';
import { policyWarnings } from './record/index.js';
import { loadSecrets } from './secrets/index.js';
import { AnswerAddress, Bool, Count, DnsServers, Endpoint, Ipv4, LogLevel, Mode, PortList, PortMap, REFUSAL_HINT_MAX, RefusalHint, TestHosts, TunnelMode } from './config-values.js';

export class ConfigError extends CodedError<'invalid_config'> {
  constructor(message: string, options?: ErrorOptions) {
    super('invalid_config', message, options);
  }
}

const limitHelp = (key: keyof ProxyLimits): string => `${LimitsSchema.shape[key].description ?? key} (default ${DEFAULT_LIMITS[key]})`;

/** Each option: its flag, its environment variable, and what it means (also the --help text). */
export const OPTIONS = {
  policy: { env: EGRESS_ENV.policyFile, arg: 'FILE', help: 'policy file (JSON or YAML) with allowHosts and connectPorts' },
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
  'refusal-hint': { env: EGRESS_ENV.refusalHint, arg: 'TEXT', help: `what the refusal of a host off the allowlist tells the client to do, instead of "add the host name to allowHosts" (printable ASCII, at most ${REFUSAL_HINT_MAX} characters)` },
} as const;

type OptionName = keyof typeof OPTIONS;

export const TEST_HOSTS_ENV = EGRESS_ENV.testHosts;

/** A limit given as text: a whole number, then the limit's own range from LimitsSchema. */
const limit = (key: keyof ProxyLimits) => Count.pipe(LimitsSchema.shape[key].unwrap()).optional();

/**
 * Option values as given (flag, else environment), keyed by flag name, to the configuration the
 * proxy runs with. The key of an issue is the option it came from.
 */
const ConfigSchema = z
  .strictObject({
    policy: z.string().optional(),
    'allow-hosts': z.string().transform(decodeAllowHosts).optional(),
    listen: Endpoint.optional(),
    'dns-server': DnsServers.optional(),
    'connect-ports': PortList.optional(),
    'metrics-listen': Endpoint.optional(),
    'log-level': LogLevel.optional(),
    'tunnel-default': TunnelMode.optional(),
    'require-sni': Bool.optional(),
    'max-connections': limit('maxConnections'),
    'max-connections-per-client': limit('maxConnectionsPerClient'),
    'idle-timeout-ms': limit('idleTimeoutMs'),
    'max-tunnel-ms': limit('maxTunnelMs'),
    'header-timeout-ms': limit('headerTimeoutMs'),
    'tls-hello-timeout-ms': limit('helloTimeoutMs'),
    'max-header-bytes': limit('maxHeaderBytes'),
    'dns-timeout-ms': limit('dnsTimeoutMs'),
    'connect-timeout-ms': limit('connectTimeoutMs'),
    'memory-limit-mb': Count.pipe(z.number().int().min(1, 'expected at least 1 (MiB)')).optional(),
    'transparent-listen': Ipv4.optional(),
    'transparent-answer': AnswerAddress.optional(),
    'transparent-port-map': PortMap.optional(),
    'refusal-hint': RefusalHint.optional(),
    mode: Mode.optional(),
    [TEST_HOSTS_ENV]: TestHosts.optional(),
    /** Which of --allow-hosts and its variable gave the list, to name it in policy errors. */
    allowHostsFrom: z.string().optional(),
  })
  .transform((o) =>
    Object.freeze({
      listen: o.listen ?? Object.freeze({ host: '127.0.0.1', port: EGRESS_PROXY_PORT }),
      metricsListen: o['metrics-listen'],
      dnsServers: Object.freeze(o['dns-server'] ?? []),
      logLevel: o['log-level'] ?? 'info',
      limits: Object.freeze({
        maxHeaderBytes: o['max-header-bytes'] ?? DEFAULT_LIMITS.maxHeaderBytes,
        headerTimeoutMs: o['header-timeout-ms'] ?? DEFAULT_LIMITS.headerTimeoutMs,
        idleTimeoutMs: o['idle-timeout-ms'] ?? DEFAULT_LIMITS.idleTimeoutMs,
        maxTunnelMs: o['max-tunnel-ms'] ?? DEFAULT_LIMITS.maxTunnelMs,
        helloTimeoutMs: o['tls-hello-timeout-ms'] ?? DEFAULT_LIMITS.helloTimeoutMs,
        dnsTimeoutMs: o['dns-timeout-ms'] ?? DEFAULT_LIMITS.dnsTimeoutMs,
        connectTimeoutMs: o['connect-timeout-ms'] ?? DEFAULT_LIMITS.connectTimeoutMs,
        maxConnections: o['max-connections'] ?? DEFAULT_LIMITS.maxConnections,
        maxConnectionsPerClient: o['max-connections-per-client'] ?? DEFAULT_LIMITS.maxConnectionsPerClient,
      }) satisfies ProxyLimits,
      /** Where the allowlist comes from: a file (re-read on SIGHUP or change) or a list. */
      policySource:
        o.policy !== undefined
          ? Object.freeze({ kind: 'file' as const, path: o.policy })
          : Object.freeze({ kind: 'list' as const, allowHosts: Object.freeze(o['allow-hosts'] ?? []), from: o.allowHostsFrom ?? OPTIONS['allow-hosts'].env }),
      /** Memory the process may use, as given by the flag (bytes); the cgroup and the machine may set less. */
      memoryLimitBytes: o['memory-limit-mb'] === undefined ? undefined : o['memory-limit-mb'] * 1024 * 1024,
      connectPorts: o['connect-ports'],
      tunnelDefault: o['tunnel-default'] ?? 'tls',
      requireTls: o['require-sni'] ?? false,
      testHosts: o[TEST_HOSTS_ENV],
      refusalHint: o['refusal-hint'],
      mode: o.mode,
      /** Transparent mode, when --transparent-listen is given (parseConfig checks the rest). */
      transparent:
        o['transparent-listen'] === undefined
          ? undefined
          : Object.freeze({
              listen: o['transparent-listen'],
              answer: o['transparent-answer'] ?? o['transparent-listen'],
              portMap: o['transparent-port-map'] ?? new Map<number, number>(),
            }),
    }),
  );

/** `check`: validate the configuration and the policy, print what they allow, and exit (--check). */
export type ProxyConfig = z.output<typeof ConfigSchema> & { readonly check?: boolean };

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

export function usage(): string {
  const rows = Object.entries(OPTIONS).map(([name, o]) => `  --${name} ${o.arg}`.padEnd(42) + `${o.help}\n${''.padEnd(42)}env ${o.env}`);
  return [
    'usage: capybara-egress (--policy FILE | --allow-hosts LIST) [options]',
    '       capybara-egress check FILE [options]    (the same as --policy FILE --check)',
    '       capybara-egress report LOGFILE|-        (the allowHosts policy a run needed, from the proxy\'s JSON log)',
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
    `Test pins (tests only): ${TEST_HOSTS_ENV}='{"host":"ip"}' pins names to addresses.`,
  ].join('\n');
}

/** Parses flags and environment. Throws ConfigError; returns undefined when --help was asked. */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): ProxyConfig | undefined {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    const options = Object.fromEntries(
      // A repeated --allow-hosts adds up, as the sandbox CLI's --allow does.
      Object.keys(OPTIONS).map((name) => [name, { type: 'string' as const, multiple: name === 'dns-server' || name === 'allow-hosts' }]),
    );
    values = parseArgs({ args: [...argv], options: { ...options, help: { type: 'boolean' }, check: { type: 'boolean' } }, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new ConfigError(`${(err as Error).message}\n\n${usage()}`);
  }
  if (values.help === true) return undefined;
  const check = values.check === true;

  const raw: Record<string, string> = {};
  const from: Record<string, string> = {};
  for (const name of Object.keys(OPTIONS) as OptionName[]) {
    const picked = pick(values, env, name);
    if (picked === undefined) continue;
    raw[name] = picked.value;
    from[name] = picked.from;
  }
  const testHosts = env[TEST_HOSTS_ENV];
  if (testHosts) {
    raw[TEST_HOSTS_ENV] = testHosts;
    from[TEST_HOSTS_ENV] = TEST_HOSTS_ENV;
  }

  if (from['allow-hosts']) raw.allowHostsFrom = from['allow-hosts'];
  if (from.policy && from['allow-hosts']) {
    throw new ConfigError(`both ${from.policy} and ${from['allow-hosts']} are set: give the allowlist one way only`);
  }
  if (!from.policy && !from['allow-hosts']) {
    throw new ConfigError(`no policy: give --policy FILE (${OPTIONS.policy.env}) or --allow-hosts LIST (${OPTIONS['allow-hosts'].env})`);
  }
  const result = ConfigSchema.safeParse(raw);
  if (!result.success) {
    const [issue] = result.error.issues;
    const key = String(issue?.path[0] ?? '');
    const sameKey = result.error.issues.filter((i) => String(i.path[0] ?? '') === key);
    throw new ConfigError(`${from[key] ?? key}: ${sameKey.map((i) => i.message).join('; ')}`);
  }
  const config = result.data;
  const needsListen = from['transparent-answer'] ?? from['transparent-port-map'];
  if (needsListen !== undefined && from['transparent-listen'] === undefined) {
    throw new ConfigError(`${needsListen} is set but transparent mode is off: give --transparent-listen IP (${OPTIONS['transparent-listen'].env}) too, or drop it`);
  }
  if (config.transparent?.answer === '0.0.0.0') {
    throw new ConfigError(`${from['transparent-listen']} is 0.0.0.0: give --transparent-answer IP (${OPTIONS['transparent-answer'].env}), the address workloads reach the proxy by`);
  }
  if (config.requireTls && config.tunnelDefault === 'opaque') {
    throw new ConfigError(`${from['require-sni']} is true but ${from['tunnel-default']} is opaque: TLS cannot be both required and optional; drop one`);
  }
  return check ? Object.freeze({ ...config, check }) : config;
}

/**
 * Builds the policy from the configured source. `readFile` is the only I/O, so a reload runs the
 * same code as start-up. Throws PolicyError naming the file (or variable), path and problem.
 */
export function loadPolicy(config: ProxyConfig, readFile: (path: string) => string): Policy {
  const source = config.policySource;
  let allowHosts: readonly AllowEntry[];
  let filePorts: readonly number[] | undefined;
  let fileText: string | undefined;
  let fileMode: PolicyMode | undefined;
  const sourceName = source.kind === 'file' ? source.path : source.from;
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
    fileMode = file.mode;
    fileText = text;
  } else {
    allowHosts = source.allowHosts;
  }
  const built = buildPolicy({
    allowHosts,
    connectPorts: config.connectPorts ?? filePorts,
    tunnelDefault: config.tunnelDefault,
    requireTls: config.requireTls,
    refusalHint: config.refusalHint,
    mode: config.mode ?? fileMode,
    ...(config.testHosts ? { testHosts: config.testHosts } : {}),
  });
  if (built.ok) return loadSecrets(built.policy, process.env, readFile, sourceName);
  // Name the variable a problem came from when it did not come from the file.
  const bySource = new Map<string, PolicyProblem[]>();
  for (const p of built.problems) {
    const where = p.path.startsWith('testHosts') ? TEST_HOSTS_ENV : p.path.startsWith('connectPorts') && config.connectPorts ? OPTIONS['connect-ports'].env : sourceName;
    bySource.set(where, [...(bySource.get(where) ?? []), p]);
  }
  const [where, problems] = [...bySource][0] ?? [sourceName, built.problems];
  throw new PolicyError(where, fileText !== undefined && where === sourceName ? placeProblems(fileText, problems) : problems);
}

/** `check FILE [options]` is `--policy FILE --check [options]`. */
export function checkArgv(args: readonly string[]): readonly string[] {
  if (args[0] !== 'check') return args;
  const file = args[1];
  if (file === undefined || file.startsWith('-')) throw new ConfigError(`check needs the policy file: capybara-egress check FILE [options]\n\n${usage()}`);
  return ['--policy', file, '--check', ...args.slice(2)];
}

export function policySourceName(config: ProxyConfig): string {
  return config.policySource.kind === 'file' ? config.policySource.path : config.policySource.from;
}

/** What --check prints for a valid configuration: what the policy allows, and its warnings. */
export function checkReport(config: ProxyConfig, policy: Policy): string {
  const lines = [
    `${policySourceName(config)}: valid`,
    `  allowHosts (${policy.allowHosts.length}): ${policy.allowHosts.join(', ') || '(none)'}`,
    ...[...policy.entryRules].map(([entry, rules]) => `  ${entry}: plain HTTP only, ${describeRules(rules, Infinity)}`),
    `  connectPorts: ${[...policy.connectPorts].join(', ')}`,
    `  mode: ${policy.mode}`,
    ...policyWarnings(policy).map((w) => `warning: ${w.message}`),
  ];
  return `${lines.join('\n')}\n`;
}
