/**
 * Configuration of the egress proxy from command-line flags and their environment twins (the
 * egress image uses only the environment). One zod schema parses and validates everything once at
 * start-up, and `ProxyConfig` is its output type; any problem is an error naming the flag or
 * variable and what is wrong, and the proxy does not start.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { CodedError, decodeAllowHosts, EGRESS_PROXY_PORT, isCodedError, readRegularFile } from '../common/index.js';
import { buildPolicy, parsePolicyText, placeProblems, PolicyError, type AllowEntry, type Policy, type PolicyMode, type PolicyProblem } from '../policy/index.js';
import { DEFAULT_LIMITS, LimitsSchema, type ProxyLimits } from './budget/index.js';
import { AnswerAddress, Bool, Count, DnsServers, Endpoint, Ipv4, LogLevel, misspeltVariable, Mode, OPTIONS, PortList, PortMap, RefusalHint, TEST_HOSTS_ENV, TestHosts, TunnelMode, usage, type OptionName } from './config-values.js';
import { caSource, type CaSource } from './inspect/index.js';
import { loadSecrets, type ReadFile } from './secrets/index.js';

export { OPTIONS, TEST_HOSTS_ENV, usage } from './config-values.js';

export class ConfigError extends CodedError<'invalid_config'> {
  constructor(message: string, options?: ErrorOptions) {
    super('invalid_config', message, options);
  }
}


/** A limit given as text: a whole number, then the limit's own range from LimitsSchema. */
const limit = (key: keyof ProxyLimits) => Count.pipe(LimitsSchema.shape[key].unwrap()).optional();

/**
 * Option values as given (flag, else environment), keyed by flag name, to the configuration the
 * proxy runs with. The key of an issue is the option it came from.
 */
const ConfigSchema = z
  .strictObject({
    policy: z.string().optional(),
    'policy-json': z.string().optional(),
    'ca-dir': z.string().optional(),
    'tenants-dir': z.string().min(1).optional(),
    'upstream-ca': z.string().optional(),
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
    /** The same, of --policy-json, and of --upstream-ca. */
    policyJsonFrom: z.string().optional(),
    upstreamCaFrom: z.string().optional(),
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
          : o['policy-json'] !== undefined
            ? Object.freeze({ kind: 'json' as const, text: o['policy-json'], from: o.policyJsonFrom ?? OPTIONS['policy-json'].env })
            : Object.freeze({ kind: 'list' as const, allowHosts: Object.freeze(o['allow-hosts'] ?? []), from: o.allowHostsFrom ?? OPTIONS['allow-hosts'].env }),
      /** A shared proxy's registrations (proxy/tenants/); the policy source is then an empty list. */
      tenantsDir: o['tenants-dir'],
      /** The certificates the upstreams of inspected hosts are verified against (default: the system's). */
      upstreamCa: Object.freeze({ path: o['upstream-ca'], from: o.upstreamCaFrom ?? '--upstream-ca' }),
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
export type ProxyConfig = z.output<typeof ConfigSchema> & {
  readonly check?: boolean;
  /** Where the deployment CA is kept: read only when the policy has inspected entries. */
  readonly ca: CaSource;
};

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
  const slip = misspeltVariable(env);
  if (slip !== undefined) throw new ConfigError(`${slip.name} is set, and capybara-egress reads no such variable: did you mean ${slip.meant}? Rename it, or unset it`);

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
  if (from['policy-json']) raw.policyJsonFrom = from['policy-json'];
  if (from['upstream-ca']) raw.upstreamCaFrom = from['upstream-ca'];
  const sources = [from.policy, from['policy-json'], from['allow-hosts']].filter((f) => f !== undefined);
  if (sources.length > 1) {
    throw new ConfigError(`both ${sources[0] ?? ''} and ${sources[1] ?? ''} are set: give the allowlist one way only`);
  }
  if (from['tenants-dir'] !== undefined) {
    if (sources.length > 0) throw new ConfigError(`both ${from['tenants-dir']} and ${sources[0] ?? ''} are set: a shared proxy decides each sandbox by its registration; drop ${sources[0] ?? ''}`);
    // Each registration's policy brings its own connectPorts and mode (tenant-policy.ts): ports
    // narrowed here would be silently ignored, and every sandbox keep 80 open.
    const perSandbox = from['connect-ports'] ?? from.mode;
    if (perSandbox !== undefined) throw new ConfigError(`both ${from['tenants-dir']} and ${perSandbox} are set: a shared proxy takes each sandbox's connectPorts and mode from its registration's policy; drop ${perSandbox}, and set them in the registrations`);
    raw['allow-hosts'] = '';
  } else if (sources.length === 0) {
    throw new ConfigError(`no policy: give --policy FILE (${OPTIONS.policy.env}), --policy-json TEXT (${OPTIONS['policy-json'].env}) or --allow-hosts LIST (${OPTIONS['allow-hosts'].env})`);
  }
  const ca = caSource(typeof values['ca-dir'] === 'string' ? values['ca-dir'] : undefined, env);
  if (!ca.ok) throw new ConfigError(ca.problem);
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
  if (config.transparent?.answer === '0.0.0.0' && config.tenantsDir === undefined) {
    throw new ConfigError(`${from['transparent-listen']} is 0.0.0.0: give --transparent-answer IP (${OPTIONS['transparent-answer'].env}), the address workloads reach the proxy by`);
  }
  if (config.requireTls && config.tunnelDefault === 'opaque') {
    throw new ConfigError(`${from['require-sni']} is true but ${from['tunnel-default']} is opaque: TLS cannot be both required and optional; drop one`);
  }
  return Object.freeze({ ...config, ca: ca.source, ...(check ? { check } : {}) });
}

/**
 * The most a policy file may hold: 1 MiB. Thousands of hosts take a few hundred kilobytes; a
 * larger file is the wrong one (a log, an image, a path to /dev/zero), and read whole, at start
 * and at every reload, it would take the memory the proxy serves with.
 */
export const MAX_POLICY_BYTES = 1024 * 1024;

/** A configured file (the policy, a secret's), read through common/regular-file.ts: never more than `maxBytes`, never a device or FIFO. */
const readConfigured: ReadFile = (path, maxBytes) => readRegularFile(path, { maxBytes });

/** Why the policy file could not be read, and what to do. */
function unreadable(err: unknown): string {
  if (!isCodedError(err, 'RegularFileError')) return `cannot read the file (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  const fix = err.code === 'file_too_large' ? ', the most a policy may hold (1 MiB): check that it is the policy file, and shorten it (a wildcard covers many hosts)' : '; give the policy file itself';
  return `cannot read the file: ${err.message}${fix}`;
}

/**
 * Builds the policy from the configured source. `readFile` is the only I/O, so a reload runs the
 * same code as start-up. Throws PolicyError naming the file (or variable), path and problem.
 */
export function loadPolicy(config: ProxyConfig, readFile: ReadFile = readConfigured): Policy {
  const source = config.policySource;
  let allowHosts: readonly AllowEntry[];
  let filePorts: readonly number[] | undefined;
  let fileText: string | undefined;
  let fileMode: PolicyMode | undefined;
  const sourceName = policySourceName(config);
  if (source.kind !== 'list') {
    let text: string;
    try {
      text = source.kind === 'file' ? readFile(source.path, MAX_POLICY_BYTES).toString('utf8') : source.text;
    } catch (err) {
      throw new PolicyError(sourceName, [{ path: '', message: unreadable(err) }], { cause: err });
    }
    if (source.kind === 'json' && !/^\s*\{/.test(text)) throw new PolicyError(sourceName, [{ path: '', message: 'expected a JSON object ({"allowHosts": [...]}), one line' }]);
    const file = parsePolicyText(text, sourceName);
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
  const source = config.policySource;
  return source.kind === 'file' ? source.path : source.from;
}
