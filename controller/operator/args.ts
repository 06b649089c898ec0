/**
 * Command line of `capybara-sandbox`: global options, one command, its arguments. Parsed once
 * with node:util parseArgs (strict: an unknown option is an error naming it); everything after
 * `--` is the command line of `exec`, never read as options.
 */
import { parseArgs } from 'node:util';
import { SandboxError } from '../errors.js';

export const OPERATOR_COMMANDS = ['ls', 'inspect', 'exec', 'destroy', 'gc', 'doctor'] as const;
export type OperatorCommand = (typeof OPERATOR_COMMANDS)[number];

export interface OperatorArgs {
  readonly command: OperatorCommand | undefined;
  readonly help: boolean;
  readonly json: boolean;
  readonly configFile: string | undefined;
  readonly endpoint: string | undefined;
  readonly tlsCertDir: string | undefined;
  readonly network: string | undefined;
  /** `KEY=VALUE` filters (ls, gc) and labels of doctor's throwaway sandbox. */
  readonly labels: Readonly<Record<string, string>>;
  readonly name: string | undefined;
  readonly execCommand: string | undefined;
  readonly timeoutMs: number | undefined;
  readonly dryRun: boolean;
  readonly minAgeMs: number;
  readonly image: string;
}

export const DEFAULT_MIN_AGE_MS = 10 * 60_000;
export const DEFAULT_SANDBOX_IMAGE = 'capybara-sandbox:latest';

export function usageError(message: string): SandboxError {
  return new SandboxError('invalid_config', `${message} (see capybara-sandbox --help)`);
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

export function parseOperatorArgs(argv: readonly string[]): OperatorArgs {
  const dashDash = argv.indexOf('--');
  const head = dashDash === -1 ? argv : argv.slice(0, dashDash);
  const tail = dashDash === -1 ? undefined : argv.slice(dashDash + 1);
  let parsed;
  try {
    parsed = parseArgs({
      args: [...head],
      allowPositionals: true,
      strict: true,
      options: {
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
      },
    });
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
  const needsName = command === 'inspect' || command === 'exec' || command === 'destroy';
  if (!help && needsName && rest.length !== 1) throw usageError(`${command} takes exactly one sandbox name`);
  if (!help && !needsName && command !== undefined && rest.length > 0) throw usageError(`${command} takes no arguments, got ${JSON.stringify(rest.join(' '))}`);
  if (!help && command === 'exec' && (tail === undefined || tail.length === 0)) throw usageError('exec needs a command after --, e.g. exec cap-x -- ls -la');
  if (!help && command !== 'exec' && tail !== undefined) throw usageError('"--" is only used by exec');
  return {
    command,
    help,
    json: values.json === true,
    configFile: values.config,
    endpoint: values.endpoint,
    tlsCertDir: values['tls-cert-dir'],
    network: values.network,
    labels: parseLabels(values.label ?? []),
    name: needsName ? rest[0] : undefined,
    execCommand: tail?.join(' '),
    timeoutMs: values.timeout === undefined ? undefined : parseDuration(values.timeout, '--timeout'),
    dryRun: values['dry-run'] === true,
    minAgeMs: values['min-age'] === undefined ? DEFAULT_MIN_AGE_MS : parseDuration(values['min-age'], '--min-age'),
    image: values.image ?? DEFAULT_SANDBOX_IMAGE,
  };
}

export const OPERATOR_HELP = `capybara-sandbox: operator tool for the sandbox-docker deployment

Usage:
  capybara-sandbox [options] ls
  capybara-sandbox [options] inspect NAME
  capybara-sandbox [options] exec NAME [--timeout 10m] -- COMMAND...
  capybara-sandbox [options] destroy NAME
  capybara-sandbox [options] gc [--dry-run] [--min-age 10m]
  capybara-sandbox [options] doctor [--image IMAGE]

Commands:
  ls        every sandbox (containers labelled dev.capybara.sandbox=1): name, state, tier,
            age, image, egress proxy state. Needs an endpoint that allows listing.
  inspect   one sandbox: state, tier, allowlist, image, egress proxy, network, volumes.
  exec      run COMMAND (bash -c, as the sandbox user) and exit with its exit code
            (124 when it timed out).
  destroy   remove the sandbox and its egress proxy, network and ephemeral volumes.
  gc        remove orphans: an egress proxy, network or volume whose sandbox container is
            gone and that is older than --min-age (default 10m, so a create in progress in
            another controller replica is never touched). Persistent workspaces (cap-ws.*)
            and live sandboxes are never removed. --dry-run only lists. Needs listing.
  doctor    check the deployment and print each check with pass/fail and what to do.
            Starts and removes one throwaway sandbox (allowlist tier, --image).

Options:
  --config FILE        deployment config as JSON (the same strict schema as the plugin's
                       extensionConfig."sandbox-docker")
  --endpoint URL       tcp://host:port or unix:///path (overrides the file)
  --tls-cert-dir DIR   ca.pem, cert.pem, key.pem for mTLS to a tcp:// engine
  --network NAME       shared sandbox network (overrides the file)
  --label KEY=VALUE    ls/gc: only resources that also carry this label; doctor: put it on
                       the throwaway sandbox (repeatable)
  --json               machine-readable output
  -h, --help           this text

The socket proxy refuses listing by design: run ls and gc on the engine host against the
engine itself (--endpoint unix:///var/run/docker.sock). inspect, exec, destroy and doctor
work through the socket proxy the controller uses.

Exit codes: 0 ok, 1 failure (or a failed doctor check), 2 bad usage or config; exec exits
with the command's code.
`;
