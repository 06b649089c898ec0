/**
 * Command line of `capybara-sandbox`: global options, one command, its arguments. Parsed once
 * with node:util parseArgs (strict: an unknown option is an error naming it); everything after
 * `--` is the command line of `exec` and `run`, never read as options. An option given to a
 * command that does not use it is an error too, so a mistyped command line never half-works.
 */
import { parseArgs } from 'node:util';
import { isAbsolute } from 'node:path';
import { IMAGES } from '../../common/index.js';
import { DEFAULT_EGRESS_TIER, EGRESS_TIER_NAMES, SandboxError, TIERS } from '../spec/index.js';
import { shellQuote } from '../exec/index.js';
import { checkSpecOptions, DEFAULT_SANDBOX_IMAGE, parseSandboxOptions, sandboxName, type SandboxOptions } from './sandbox-options.js';
import { parseLsOptions, type LsOptions } from './ls-options.js';

export const OPERATOR_COMMANDS = ['up', 'down', 'create', 'run', 'ls', 'inspect', 'logs', 'exec', 'allow', 'deny', 'destroy', 'gc', 'doctor'] as const;
export type OperatorCommand = (typeof OPERATOR_COMMANDS)[number];

/** Commands that talk to the engine itself, not to the socket proxy. */
export const ENGINE_COMMANDS: readonly OperatorCommand[] = ['up', 'down', 'ls', 'gc', 'logs'];

export interface OperatorArgs {
  readonly command: OperatorCommand | undefined;
  readonly help: boolean;
  readonly json: boolean;
  readonly configFile: string | undefined;
  readonly endpoint: string | undefined;
  readonly tlsCertDir: string | undefined;
  readonly network: string | undefined;
  /** `KEY=VALUE` filters (ls, gc) and labels of what up, create, run and doctor make. */
  readonly labels: Readonly<Record<string, string>>;
  /** The sandbox name (`cap-<id>`), for the commands that take one. */
  readonly name: string | undefined;
  /** allow, deny: the hosts after the name. */
  readonly hosts: readonly string[];
  /** The command line after `--` (exec, run), as `bash -c` runs it (commandLine). */
  readonly execCommand: string | undefined;
  readonly timeoutMs: number | undefined;
  readonly dryRun: boolean;
  readonly minAgeMs: number;
  readonly image: string;
  /** create and run: what to create. */
  readonly sandbox: SandboxOptions;
  /** run: destroy the sandbox after the command. */
  readonly remove: boolean;
  /**
   * run: make the sandbox for this run with its egress proxy in report mode, and print the
   * allowHosts policy the command needed (stdout); the sandbox is destroyed after.
   */
  readonly report: boolean;
  /** destroy: a sandbox that does not exist is no error (as docker rm -f). */
  readonly force: boolean;
  /** exec, run: -i passes the CLI's stdin to the command; -t gives the command a terminal. */
  readonly interactive: boolean;
  readonly tty: boolean;
  /** exec, run: every process the sandbox user left running is ended before the command starts. */
  readonly fresh: boolean;
  /** logs: -f/--follow, and --denied (refusals only). */
  readonly logs: { readonly follow: boolean; readonly denied: boolean };
  /** ls: -q, --format, --filter. */
  readonly ls: LsOptions;
  /** down: destroy every sandbox (and the shared network) before the socket proxy. */
  readonly all: boolean;
  /** The socket proxy of up and down (and of create/run when they start it themselves). */
  readonly socketDir: string;
  readonly proxyName: string;
  readonly proxyImage: string;
}

const DEFAULT_MIN_AGE_MS = 10 * 60_000;
/** Where `up` puts the socket proxy's unix socket: a directory only root can open. */
export const DEFAULT_SOCKET_DIR = '/run/capybara-sandbox';
/** The container `up` starts. Not `cap-`: the socket proxy never lets a controller touch it. */
export const DEFAULT_PROXY_NAME = 'capybara-socket-proxy';
export const DEFAULT_PROXY_IMAGE = IMAGES.proxy;

/** `none | internal | allowlist (default) | open (needs allowOpenEgress)`, from the tier table. */
export const TIER_CHOICES = EGRESS_TIER_NAMES.map((tier) =>
  `${tier}${tier === DEFAULT_EGRESS_TIER ? ' (default)' : ''}${TIERS[tier].needsAllowOpenEgress ? ' (needs allowOpenEgress)' : ''}`).join(' | ');

export function usageError(message: string): SandboxError {
  return new SandboxError('invalid_config', `${message} (see capybara-sandbox --help)`);
}

/** Docker's own rule for a container name (daemon/names: a leading "/" is allowed and dropped). */
const CONTAINER_NAME_RE = /^\/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;

/**
 * The socket proxy's container name: what Docker accepts as a container name, without the
 * optional leading "/" (the name is then what Docker stores and what the proxy's rules see). Never
 * a `cap-` name, in any spelling Docker accepts ("/cap-x" is cap-x): the socket proxy lets callers
 * exec into any `cap-` container, and an exec in the container that holds the engine socket is
 * the engine.
 */
function proxyName(text: string): string {
  if (!CONTAINER_NAME_RE.test(text)) {
    throw usageError(`--proxy-name ${JSON.stringify(text)} is not a container name: a letter or digit, then at least one more of letters, digits, "_", "." or "-"`);
  }
  const name = text.startsWith('/') ? text.slice(1) : text;
  if (/^cap-/i.test(name)) throw usageError(`--proxy-name ${JSON.stringify(text)} names a cap- container, the prefix the socket proxy lets callers exec into; choose another name`);
  return name;
}

/** An image option: what a Docker reference can be at all (printable ASCII, no blanks). */
function imageOption(text: string | undefined, option: string): string | undefined {
  if (text !== undefined && !/^[\x21-\x7e]+$/.test(text)) throw usageError(`${option} ${JSON.stringify(text)} is not an image reference, e.g. capybara-sandbox:latest`);
  return text;
}

/** An absolute directory: the socket of up is found there by every later command, from any cwd. */
function socketDirOption(text: string | undefined): string {
  if (text === undefined) return DEFAULT_SOCKET_DIR;
  if (!isAbsolute(text)) throw usageError(`--socket-dir ${JSON.stringify(text)} must be an absolute path, e.g. ${DEFAULT_SOCKET_DIR}`);
  return text;
}

/** "90s", "10m", "2h", "1d" or a number of seconds. */
export function parseDuration(text: string, option: string): number {
  const match = /^(\d+)(s|m|h|d)?$/.exec(text);
  if (match === null) throw usageError(`${option} ${JSON.stringify(text)} is not a duration such as 30s, 10m, 2h or 0`);
  const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as 's' | 'm' | 'h' | 'd' | undefined ?? 's'];
  return Number(match[1]) * unit;
}

function parseLabels(values: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const value of values) {
    const eq = value.indexOf('=');
    if (eq <= 0) throw usageError(`--label ${JSON.stringify(value)} is not KEY=VALUE`);
    labels[value.slice(0, eq)] = value.slice(eq + 1);
  }
  return labels;
}

const OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  json: { type: 'boolean' },
  config: { type: 'string' },
  endpoint: { type: 'string' },
  'tls-cert-dir': { type: 'string' },
  network: { type: 'string' },
  label: { type: 'string', multiple: true },
  timeout: { type: 'string' },
  'dry-run': { type: 'boolean' },
  'min-age': { type: 'string' },
  image: { type: 'string' },
  egress: { type: 'string' },
  allow: { type: 'string', multiple: true },
  cpu: { type: 'string' },
  memory: { type: 'string' },
  workspace: { type: 'string' },
  rm: { type: 'boolean' },
  report: { type: 'boolean' },
  force: { type: 'boolean', short: 'f' },
  follow: { type: 'boolean' },
  denied: { type: 'boolean' },
  quiet: { type: 'boolean', short: 'q' },
  format: { type: 'string' },
  filter: { type: 'string', multiple: true },
  all: { type: 'boolean' },
  interactive: { type: 'boolean', short: 'i' },
  tty: { type: 'boolean', short: 't' },
  fresh: { type: 'boolean' },
  'socket-dir': { type: 'string' },
  'proxy-name': { type: 'string' },
  'proxy-image': { type: 'string' },
} as const;
type OptionName = keyof typeof OPTIONS;

const SANDBOX_OPTIONS: readonly OptionName[] = ['egress', 'allow', 'cpu', 'memory', 'workspace'];
/** Options that only some commands read; every other option is global. */
const COMMAND_OPTIONS: Partial<Record<OptionName, readonly OperatorCommand[]>> = {
  timeout: ['exec', 'run'],
  'dry-run': ['gc'],
  'min-age': ['gc'],
  image: ['up', 'create', 'run', 'doctor'],
  rm: ['run'],
  report: ['run'],
  force: ['destroy'],
  follow: ['logs'],
  denied: ['logs'],
  quiet: ['ls'],
  format: ['ls'],
  filter: ['ls'],
  all: ['down'],
  interactive: ['exec', 'run'],
  tty: ['exec', 'run'],
  fresh: ['exec', 'run'],
  ...Object.fromEntries(SANDBOX_OPTIONS.map((o) => [o, ['create', 'run']])),
};

/** The options only some commands take that `command` takes, as typed (`--timeout`); for its help. */
export function commandOptions(command: OperatorCommand): string[] {
  return Object.entries(COMMAND_OPTIONS).filter(([, commands]) => commands.includes(command)).map(([option]) => `--${option}`);
}

/** A sandbox name given on the command line; a bad one is a usage error (exit 2). */
function usageName(word: string): string {
  try {
    return sandboxName(word);
  } catch (err) {
    throw usageError((err as Error).message);
  }
}

/** Commands taking one sandbox name; `--` commands take a command line after it. */
const NAMED: readonly OperatorCommand[] = ['create', 'run', 'inspect', 'logs', 'exec', 'allow', 'deny', 'destroy'];
/** Commands taking hosts after the name. */
const WITH_HOSTS: readonly OperatorCommand[] = ['allow', 'deny'];
const DASH_DASH: readonly OperatorCommand[] = ['exec', 'run'];

/**
 * The `bash -c` string of the words after `--`. One word is a shell command line of its own, as
 * typed (`-- 'ls | wc -l'`). Several words are an argv, each quoted, so the shell that split them
 * is the only one that did: `-- sh -c 'exit 7'` runs sh with two arguments (joined with spaces,
 * `sh -c exit 7` would run `exit`), `-- python3 -c 'print(1)'` prints 1.
 */
function commandLine(words: readonly string[]): string {
  return words.length === 1 ? words[0] ?? '' : words.map(shellQuote).join(' ');
}

/**
 * run --report learns an allowlist: it needs a tier with an egress proxy (the one that writes
 * decisions), and --json would mix the command's result with the policy on stdout.
 */
function checkReportOptions(args: OperatorArgs): void {
  if (!TIERS[args.sandbox.egress].egressProxy) {
    throw usageError(`--report learns an allowlist from the decisions of the egress proxy, and --egress ${args.sandbox.egress} has none; use --egress ${DEFAULT_EGRESS_TIER} (the default)`);
  }
  if (args.json) throw usageError('--report prints a policy file on stdout; it does not combine with --json');
}

export function parseOperatorArgs(argv: readonly string[]): OperatorArgs {
  const dashDash = argv.indexOf('--');
  const head = dashDash === -1 ? argv : argv.slice(0, dashDash);
  const tail = dashDash === -1 ? undefined : argv.slice(dashDash + 1);
  let parsed;
  try {
    parsed = parseArgs({ args: [...head], allowPositionals: true, strict: true, tokens: true, options: OPTIONS });
  } catch (err) {
    throw usageError((err as Error).message);
  }
  const { values } = parsed;
  // `help COMMAND` is `COMMAND --help`.
  const helpWord = parsed.positionals[0] === 'help';
  const positionals = helpWord ? parsed.positionals.slice(1) : parsed.positionals;
  const [commandWord, ...rest] = positionals;
  const help = values.help === true || helpWord;
  let command: OperatorCommand | undefined;
  if (commandWord !== undefined) {
    if (!(OPERATOR_COMMANDS as readonly string[]).includes(commandWord)) {
      throw usageError(`unknown command ${JSON.stringify(commandWord)}; commands: ${OPERATOR_COMMANDS.join(', ')}`);
    }
    command = commandWord as OperatorCommand;
  } else if (!help) {
    throw usageError('a command is required');
  }
  // `-f` is --force to destroy and --follow to logs, as to docker rm and docker logs.
  if (command === 'logs' && values.force === true) {
    if (parsed.tokens.some((token) => token.kind === 'option' && token.name === 'force' && token.rawName === '--force')) {
      throw usageError('--force does not apply to logs (there -f is --follow)');
    }
    values.force = undefined;
    values.follow = true;
  }
  const needsName = command !== undefined && NAMED.includes(command);
  if (!help && command !== undefined) {
    if (WITH_HOSTS.includes(command)) {
      if (rest.length < 2) throw usageError(`${command} takes a sandbox name and at least one host, e.g. ${command} demo pypi.org`);
    } else if (needsName && rest.length !== 1) throw usageError(`${command} takes exactly one sandbox name`);
    if (!needsName && rest.length > 0) throw usageError(`${command} takes no arguments, got ${JSON.stringify(rest.join(' '))}`);
    const takesTail = DASH_DASH.includes(command);
    if (takesTail && (tail === undefined || tail.length === 0)) throw usageError(`${command} needs a command after --, e.g. ${command} demo -- ls -la`);
    if (!takesTail && tail !== undefined) throw usageError('"--" is only used by exec and run');
    for (const [option, commands] of Object.entries(COMMAND_OPTIONS)) {
      if (values[option as OptionName] !== undefined && !commands.includes(command)) {
        throw usageError(`--${option} does not apply to ${command} (only to ${commands.join(', ')})`);
      }
    }
  }
  const args: OperatorArgs = {
    command,
    help,
    json: values.json === true,
    configFile: values.config,
    endpoint: values.endpoint,
    tlsCertDir: values['tls-cert-dir'],
    network: values.network,
    labels: parseLabels(values.label ?? []),
    name: needsName && !help ? usageName(rest[0] ?? '') : undefined,
    hosts: command !== undefined && WITH_HOSTS.includes(command) && !help ? rest.slice(1) : [],
    execCommand: tail === undefined ? undefined : commandLine(tail),
    timeoutMs: values.timeout === undefined ? undefined : parseDuration(values.timeout, '--timeout'),
    dryRun: values['dry-run'] === true,
    minAgeMs: values['min-age'] === undefined ? DEFAULT_MIN_AGE_MS : parseDuration(values['min-age'], '--min-age'),
    image: imageOption(values.image, '--image') ?? DEFAULT_SANDBOX_IMAGE,
    sandbox: parseSandboxOptions({
      egress: values.egress,
      allow: values.allow,
      cpu: values.cpu,
      memory: values.memory,
      workspace: values.workspace,
      image: values.image,
    }),
    remove: values.rm === true,
    report: values.report === true,
    force: values.force === true,
    interactive: values.interactive === true,
    tty: values.tty === true,
    fresh: values.fresh === true,
    logs: { follow: values.follow === true, denied: values.denied === true },
    ls: parseLsOptions({ quiet: values.quiet === true, json: values.json === true, format: values.format, filters: values.filter ?? [] }),
    all: values.all === true,
    socketDir: socketDirOption(values['socket-dir']),
    proxyName: proxyName(values['proxy-name'] ?? DEFAULT_PROXY_NAME),
    proxyImage: imageOption(values['proxy-image'], '--proxy-image') ?? DEFAULT_PROXY_IMAGE,
  };
  // What create and run would ask the controller for is refused here, naming the option.
  if (!help && (command === 'create' || command === 'run')) checkSpecOptions(args.name ?? '', args.sandbox);
  if (!help && args.report) checkReportOptions(args);
  return args;
}
