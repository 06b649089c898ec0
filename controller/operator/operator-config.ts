/**
 * The operator CLI's deployment config: the plugin's own strict schema, read from a JSON file
 * (or, without one, from CAPYBARA_EXTENSION_CONFIG as the host reads it), overridden by flags
 * and validated once. Errors name the file or variable. Without an endpoint anywhere, engine
 * commands use the local engine socket and the others the socket `up` makes; the result says
 * which, because only a default endpoint may be started on demand.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseDeploymentConfig, type DeploymentConfig, SandboxError } from '../spec/index.js';
import { EGRESS_ENV } from '../../common/index.js';
import { ENGINE_COMMANDS, usageError, type OperatorArgs } from './args.js';
import type { SandboxOptions } from './sandbox-options.js';

/** The host's variable: `{"sandbox-docker": {...deployment config...}}`. */
const EXTENSION_CONFIG_ENV = 'CAPYBARA_EXTENSION_CONFIG';
const PLUGIN_KEY = 'sandbox-docker';
export const PROXY_SOCKET_FILE = 'docker.sock';

export interface OperatorConfig {
  readonly config: DeploymentConfig;
  /**
   * True when the endpoint is the socket of `up` because nothing named one: only then may
   * create and run start the socket proxy themselves.
   */
  readonly proxyOnDemand: boolean;
}

/** The engine's own socket on this host: DOCKER_HOST when it names a unix socket. */
export function localEngineEndpoint(env: NodeJS.ProcessEnv): string {
  const host = env.DOCKER_HOST;
  return host?.startsWith('unix://') ? host : 'unix:///var/run/docker.sock';
}

function proxySocketEndpoint(socketDir: string): string {
  return `unix://${join(socketDir, PROXY_SOCKET_FILE)}`;
}

function parseObject(text: string, source: string, what: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new SandboxError('invalid_config', `${source} is not valid JSON: ${(err as Error).message}`, { cause: err });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new SandboxError('invalid_config', `${source} must hold a JSON object (${what}).`);
  }
  return parsed as Record<string, unknown>;
}

function fromFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new SandboxError('invalid_config', `Cannot read config file ${file}: ${(err as Error).message}`, { cause: err });
  }
  return parseObject(text, `Config file ${file}`, 'the value of extensionConfig."sandbox-docker"');
}

function fromEnv(text: string): Record<string, unknown> {
  const all = parseObject(text, `${EXTENSION_CONFIG_ENV}`, `{"${PLUGIN_KEY}": {...}}`);
  const mine = all[PLUGIN_KEY];
  // A key misspelt ("sandbox_docker") would leave every setting at its default: runc for runsc,
  // any image for allowedImages, the highest ceilings.
  if (mine === undefined) {
    const keys = Object.keys(all).map((k) => JSON.stringify(k)).join(', ') || 'none';
    throw new SandboxError('invalid_config', `${EXTENSION_CONFIG_ENV} has no "${PLUGIN_KEY}" key (its keys: ${keys}): write this plugin's deployment config under "${PLUGIN_KEY}", give --config FILE, or unset the variable.`);
  }
  if (typeof mine !== 'object' || mine === null || Array.isArray(mine)) {
    throw new SandboxError('invalid_config', `${EXTENSION_CONFIG_ENV}."${PLUGIN_KEY}" must be a JSON object.`);
  }
  return { ...(mine as Record<string, unknown>) };
}

export function loadOperatorConfig(args: OperatorArgs, env: NodeJS.ProcessEnv): OperatorConfig {
  const envText = env[EXTENSION_CONFIG_ENV];
  let input: Record<string, unknown> = {};
  let source = 'command line';
  if (args.configFile !== undefined) {
    input = fromFile(args.configFile);
    source = `config file ${args.configFile} (with command-line overrides)`;
  } else if (envText !== undefined && envText !== '') {
    input = fromEnv(envText);
    source = `${EXTENSION_CONFIG_ENV}."${PLUGIN_KEY}" (with command-line overrides)`;
  }
  if (args.tlsCertDir !== undefined) input.tlsCertDir = args.tlsCertDir;
  if (args.network !== undefined) input.network = args.network;
  let proxyOnDemand = false;
  if (args.command === 'up' || args.command === 'down') {
    // Their --endpoint names the engine; the deployment's endpoint is the socket they manage.
    input.endpoint = proxySocketEndpoint(args.socketDir);
    proxyOnDemand = true;
  } else if (args.endpoint !== undefined) {
    input.endpoint = args.endpoint;
  } else if (input.endpoint === undefined) {
    const engineCommand = args.command !== undefined && ENGINE_COMMANDS.includes(args.command);
    input.endpoint = engineCommand ? localEngineEndpoint(env) : proxySocketEndpoint(args.socketDir);
    proxyOnDemand = !engineCommand;
  }
  requireFlagValues(args);
  const config = parseDeploymentConfig(input, source);
  if (args.command === 'create' || args.command === 'run') requireWithinCeilings(args.sandbox, config);
  return { config, proxyOnDemand };
}

/**
 * Each config value typed as a flag, checked on its own first, so that a bad one is refused
 * naming the flag (`--endpoint "http://x" is invalid: endpoint: must be ...`), not "the config".
 */
function requireFlagValues(args: OperatorArgs): void {
  const base = { endpoint: 'unix:///var/run/docker.sock' };
  const flags: ReadonlyArray<readonly [string, string, string | undefined]> = [
    ['--endpoint', 'endpoint', args.endpoint],
    ['--network', 'network', args.network],
  ];
  for (const [flag, key, value] of flags) {
    if (value !== undefined) parseDeploymentConfig({ ...base, [key]: value }, `${flag} ${JSON.stringify(value)}`);
  }
}

/**
 * --cpu and --memory against the deployment's ceilings, before anything is created: the
 * controller refuses them too, but only after "creating" was said.
 */
function requireWithinCeilings(o: SandboxOptions, config: DeploymentConfig): void {
  const over = (flag: string, value: number | undefined, ceiling: number, key: string): void => {
    if (value !== undefined && value > ceiling) throw usageError(`${flag} ${value} is above this deployment's maximum of ${ceiling} (maxLimits.${key} in the config)`);
  };
  over('--cpu', o.cpu, config.maxLimits.cpu, 'cpu');
  over('--memory', o.memoryMb, config.maxLimits.memoryMb, 'memoryMb');
}

/** The socket directory of up when the endpoint is its socket (then it must stay root's alone). */
export function upSocketDir(args: OperatorArgs, config: DeploymentConfig): string | undefined {
  return config.endpoint === proxySocketEndpoint(args.socketDir) ? args.socketDir : undefined;
}

/** The engine `up` and `down` talk to: --endpoint, else the local socket. Unix only. */
export function engineSocketFor(args: OperatorArgs, env: NodeJS.ProcessEnv): string {
  const endpoint = args.endpoint ?? localEngineEndpoint(env);
  if (!endpoint.startsWith('unix:///')) {
    throw new SandboxError('invalid_config', `${args.command ?? 'up'} needs the engine's own unix socket (its path is mounted into the socket proxy), got --endpoint ${endpoint}; run it on the engine host.`);
  }
  return endpoint.slice('unix://'.length);
}

/**
 * Tests pin a host name to a test server with the egress image's own variable; the CLI passes
 * it on to the egress proxies of the sandboxes it creates (and says so each time).
 */
export function egressTestHostsFromEnv(env: NodeJS.ProcessEnv): Record<string, string> | undefined {
  const text = env[EGRESS_ENV.testHosts];
  if (text === undefined || text === '') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new SandboxError('invalid_config', `${EGRESS_ENV.testHosts} is not valid JSON: ${(err as Error).message}`, { cause: err });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !Object.values(parsed).every((v) => typeof v === 'string')) {
    throw new SandboxError('invalid_config', `${EGRESS_ENV.testHosts} must be a JSON object of host name to IP address, e.g. {"example.test":"10.0.0.2"}.`);
  }
  return parsed as Record<string, string>;
}
