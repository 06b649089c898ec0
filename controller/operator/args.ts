/**
 * Command line of `capybara-sandbox`: global options, one command, its arguments. Parsed once
 * with node:util parseArgs (strict: an unknown option is an error naming it); everything after
 * `--` is the command line of `exec` and `run`, never read as options. An option given to a
 * command that does not use it is an error too, so a mistyped command line never half-works.
 */
import { parseArgs } from 'node:util';
import { IMAGES } from '../../common/index.js';
import { DEFAULT_EGRESS_TIER, EGRESS_TIER_NAMES, SandboxError, TIERS } from '../spec/index.js';
import { shellQuote } from '../exec/index.js';
import { DEFAULT_SANDBOX_IMAGE, parseSandboxOptions, sandboxName, type SandboxOptions } from './sandbox-options.js';

export const OPERATOR_COMMANDS = ['up', 'down', 'create', 'run', 'ls', 'inspect', 'exec', 'destroy', 'gc', 'doctor'] as const;
export type OperatorCommand = (typeof OPERATOR_COMMANDS)[number];

/** Commands that talk to the engine itself, not to the socket proxy. */
export const ENGINE_COMMANDS: readonly OperatorCommand[] = ['up', 'down', 'ls', 'gc'];

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
  /** destroy: a sandbox that does not exist is no error (as docker rm -f). */
  readonly force: boolean;
  /** The socket proxy of up and down (and of create/run when they start it themselves). */
  readonly socketDir: string;
  readonly proxyName: string;
  readonly proxyImage: string;
}

const DEFAULT_MIN_AGE_MS = 10 * 60_000;
/** Where `up` puts the socket proxy's unix socket: a directory only root can open. */
const DEFAULT_SOCKET_DIR = '/run/capybara-sandbox';
/** The container `up` starts. Not `cap-`: the socket proxy never lets a controller touch it. */
const DEFAULT_PROXY_NAME = 'capybara-socket-proxy';
const DEFAULT_PROXY_IMAGE = IMAGES.proxy;

/** `none | internal | allowlist (default) | open (needs allowOpenEgress)`, from the tier table. */
const TIER_CHOICES = EGRESS_TIER_NAMES.map((tier) =>
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
  force: { type: 'boolean', short: 'f' },
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
  force: ['destroy'],
  ...Object.fromEntries(SANDBOX_OPTIONS.map((o) => [o, ['create', 'run']])),
};

/** A sandbox name given on the command line; a bad one is a usage error (exit 2). */
function usageName(word: string): string {
  try {
    return sandboxName(word);
  } catch (err) {
    throw usageError((err as Error).message);
  }
}

/** Commands taking one sandbox name; `--` commands take a command line after it. */
const NAMED: readonly OperatorCommand[] = ['create', 'run', 'inspect', 'exec', 'destroy'];
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

export function parseOperatorArgs(argv: readonly string[]): OperatorArgs {
  const dashDash = argv.indexOf('--');
  const head = dashDash === -1 ? argv : argv.slice(0, dashDash);
  const tail = dashDash === -1 ? undefined : argv.slice(dashDash + 1);
  let parsed;
  try {
    parsed = parseArgs({ args: [...head], allowPositionals: true, strict: true, options: OPTIONS });
  } catch (err) {
    throw usageError((err as Error).message);
  }
  const { values, positionals } = parsed;
  const [commandWord, ...rest] = positionals;
  const help = values.help === true;
  let command: OperatorCommand | undefined;
  if (commandWord !== undefined) {
    if (!(OPERATOR_COMMANDS as readonly string[]).includes(commandWord)) {
      throw usageError(`unknown command ${JSON.stringify(commandWord)}; commands: ${OPERATOR_COMMANDS.join(', ')}`);
    }
    command = commandWord as OperatorCommand;
  } else if (!help) {
    throw usageError('a command is required');
  }
  const needsName = command !== undefined && NAMED.includes(command);
  if (!help && command !== undefined) {
    if (needsName && rest.length !== 1) throw usageError(`${command} takes exactly one sandbox name`);
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
  return {
    command,
    help,
    json: values.json === true,
    configFile: values.config,
    endpoint: values.endpoint,
    tlsCertDir: values['tls-cert-dir'],
    network: values.network,
    labels: parseLabels(values.label ?? []),
    name: needsName && !help ? usageName(rest[0] ?? '') : undefined,
    execCommand: tail === undefined ? undefined : commandLine(tail),
    timeoutMs: values.timeout === undefined ? undefined : parseDuration(values.timeout, '--timeout'),
    dryRun: values['dry-run'] === true,
    minAgeMs: values['min-age'] === undefined ? DEFAULT_MIN_AGE_MS : parseDuration(values['min-age'], '--min-age'),
    image: values.image ?? DEFAULT_SANDBOX_IMAGE,
    sandbox: parseSandboxOptions({
      egress: values.egress,
      allow: values.allow,
      cpu: values.cpu,
      memory: values.memory,
      workspace: values.workspace,
      image: values.image,
    }),
    remove: values.rm === true,
    force: values.force === true,
    socketDir: values['socket-dir'] ?? DEFAULT_SOCKET_DIR,
    proxyName: proxyName(values['proxy-name'] ?? DEFAULT_PROXY_NAME),
    proxyImage: values['proxy-image'] ?? DEFAULT_PROXY_IMAGE,
  };
}

export const OPERATOR_HELP = `capybara-sandbox: operator tool for the sandbox-docker deployment

Usage:
  capybara-sandbox [options] up [--socket-dir DIR] [--image IMAGE]
  capybara-sandbox [options] run NAME [sandbox options] [--rm] [--timeout 10m] -- COMMAND...
  capybara-sandbox [options] create NAME [sandbox options]
  capybara-sandbox [options] exec NAME [--timeout 10m] -- COMMAND...
  capybara-sandbox [options] inspect NAME
  capybara-sandbox [options] destroy [-f|--force] NAME
  capybara-sandbox [options] down
  capybara-sandbox [options] ls
  capybara-sandbox [options] gc [--dry-run] [--min-age 10m]
  capybara-sandbox [options] doctor [--image IMAGE]

Commands:
  up        start (or reuse) the socket proxy container on a unix socket in --socket-dir
            (default ${DEFAULT_SOCKET_DIR}, root only), check the images, print the endpoint.
  run       run COMMAND (as the sandbox user) in sandbox NAME, creating it first
            with the sandbox options when it does not exist; prints the output and exits
            with the command's exit code (124 when it timed out). --rm destroys it after.
  create    create sandbox NAME; refused when it already exists.
  exec      run COMMAND in an existing sandbox and exit with its exit code.
  inspect   one sandbox: state, tier, allowlist, image, egress proxy, network, volumes.
  destroy   remove the sandbox and its egress proxy, network and ephemeral volumes; exit 1
            "no such sandbox" when it does not exist (--force: 0, as docker rm -f).
  down      stop and remove the socket proxy container that up started (sandboxes stay).
  ls        every sandbox (containers labelled dev.capybara.sandbox=1): name, state, tier,
            age, image, egress proxy state.
  gc        remove orphans: an egress proxy, network or volume whose sandbox container is
            gone and that is older than --min-age (default 10m, so a create in progress in
            another controller replica is never touched), and all of a sandbox whose create
            never finished (its controller died). Persistent workspaces (cap-ws.*) and live
            sandboxes are never removed. --dry-run only lists.
  doctor    check the deployment and print each check with pass/fail and what to do.
            Starts and removes one throwaway sandbox (allowlist tier, --image).

NAME is a sandbox name (cap-demo) or its id (demo, meaning cap-demo).

COMMAND (after --): one word is a shell command line, run by bash -c as written
(-- 'ls -la | wc -l'); several words are a program and its arguments, each passed
as it is (-- python3 -c 'print(1)'; -- sh -c 'exit 7' exits 7).

Sandbox options (create, run):
  --egress TIER        ${TIER_CHOICES}
  --allow HOST         allowlist entry: a host name or *.example.com (repeatable, or
                       comma-separated); only with the allowlist tier
  --image IMAGE        sandbox image (default ${DEFAULT_SANDBOX_IMAGE})
  --cpu N              CPUs (fractions allowed; default 1)
  --memory MB          memory in MiB (default 1024)
  --workspace KEY      mount the persistent workspace KEY (volume cap-ws.KEY, kept by destroy)
  run reuses an existing sandbox, but refuses when an option given differs from what the
  sandbox was created with.

Options:
  --config FILE        deployment config as JSON (the same strict schema as the plugin's
                       extensionConfig."sandbox-docker"); without it, the environment
                       variable CAPYBARA_EXTENSION_CONFIG is read as the host reads it
  --endpoint URL       tcp://host:port or unix:///path (overrides the config). For up, down,
                       ls and gc it names the engine (default unix:///var/run/docker.sock);
                       for the other commands the socket proxy (default: the socket of up)
  --tls-cert-dir DIR   ca.pem, cert.pem, key.pem for mTLS to a tcp:// engine
  --network NAME       shared sandbox network (overrides the config; default capybara-sandbox)
  --socket-dir DIR     directory of the socket of up (default ${DEFAULT_SOCKET_DIR}); its
                       socket is the default endpoint of the commands that use the proxy
  --proxy-name NAME    the socket proxy container of up and down (default ${DEFAULT_PROXY_NAME};
                       never cap-..., which the socket proxy lets callers exec into)
  --proxy-image IMAGE  its image (default ${DEFAULT_PROXY_IMAGE})
  --label KEY=VALUE    ls/gc: only resources that also carry this label; up, create, run,
                       doctor: put it on what they create (repeatable)
  --json               machine-readable output
  -h, --help           this text
  --version            the version (alone)

Without an endpoint anywhere, create and run start the socket proxy as up does when nothing
answers on its socket, so that the first command needs no set-up beyond the images.

The socket proxy refuses listing by design: ls and gc run against the engine itself.

Exit codes: 0 ok, 1 failure (or a failed doctor check), 2 bad usage or config; exec and run
exit with the command's code.
`;
