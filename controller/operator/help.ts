/**
 * The help of `capybara-sandbox`: one entry per command (what `capybara-sandbox COMMAND --help`
 * and `capybara-sandbox help COMMAND` print), and the global help built from the same table, one
 * line per command. Keyed by command, so a command added to OPERATOR_COMMANDS does not compile
 * until it has its help; test/controller/operator/operator-help.test.ts checks that every
 * option a command takes is in its entry.
 */
import { DEFAULT_PROXY_IMAGE, DEFAULT_PROXY_NAME, DEFAULT_SOCKET_DIR, OPERATOR_COMMANDS, TIER_CHOICES, type OperatorCommand } from './args.js';
import { LS_FORMATS, LS_STATUSES } from './ls-options.js';
import { DEFAULT_SANDBOX_IMAGE } from './sandbox-options.js';

export interface CommandHelp {
  /** The one line of the global help. */
  readonly summary: string;
  /** What follows `capybara-sandbox [options] `. */
  readonly usage: string;
  /** What it does, in a few lines. */
  readonly description: string;
  /** [argument, meaning] */
  readonly arguments: ReadonlyArray<readonly [string, string]>;
  /** [option as typed, meaning]: the options only this command (or a few) takes. */
  readonly options: ReadonlyArray<readonly [string, string]>;
  /** Whole command lines. */
  readonly examples: readonly string[];
}

const NAME_ARG = ['NAME', 'a sandbox name (cap-demo) or its id (demo, meaning cap-demo)'] as const;
const COMMAND_ARG = [
  'COMMAND',
  'after --: one word is a shell command line, run by bash -c as written (-- \'ls -la | wc -l\'); several words are a program and its arguments, each passed as it is (-- python3 -c \'print(1)\'; -- sh -c \'exit 7\' exits 7)',
] as const;
const TIMEOUT = ['--timeout 10m', 'kill the command after this long (30s, 10m, 2h) and exit 124'] as const;
const STREAMS: ReadonlyArray<readonly [string, string]> = [
  ['-i, --interactive', 'pass this stdin to the command (its end closes the command\'s stdin); without it the command\'s stdin is empty'],
  ['--fresh', 'end every process the sandbox user left running (other commands\' too) before the command starts, so none can read what -i sends or write into its output'],
  ['-t, --tty', 'run the command on a terminal (stdout and stderr one stream, CRLF line ends), sized as this one; with -i on a terminal, raw mode here so that keys (Ctrl-C, Ctrl-D) go to the command. Given even when stdin is not a terminal, as docker exec -t does'],
];

const SANDBOX_OPTIONS: ReadonlyArray<readonly [string, string]> = [
  ['--egress TIER', TIER_CHOICES],
  ['--allow HOST', 'allowlist entry: a host name or *.example.com (repeatable, or comma-separated); only with the allowlist tier'],
  ['--image IMAGE', `sandbox image (default ${DEFAULT_SANDBOX_IMAGE})`],
  ['--cpu N', 'CPUs (fractions allowed; default 1)'],
  ['--memory MB', 'memory in MiB (default 1024)'],
  ['--workspace KEY', 'mount the persistent workspace KEY (volume cap-ws.KEY, kept by destroy)'],
  ['--label KEY=VALUE', 'put this label on what is created (repeatable)'],
];

export const COMMAND_HELP: { readonly [C in OperatorCommand]: CommandHelp } = {
  up: {
    summary: 'start (or reuse) the socket proxy container on a root-only unix socket',
    usage: 'up [--socket-dir DIR] [--image IMAGE]',
    description: `Starts the socket proxy container (or reuses a running one that matches) through the engine itself,
with its unix socket in --socket-dir (default ${DEFAULT_SOCKET_DIR}, root only), checks the images,
and prints the endpoint and the plugin config that uses it. Runs as root on the engine host.`,
    arguments: [],
    options: [
      ['--image IMAGE', `a sandbox image to admit and check (default ${DEFAULT_SANDBOX_IMAGE})`],
      ['--label KEY=VALUE', 'put this label on the socket proxy container (repeatable)'],
    ],
    examples: ['sudo capybara-sandbox up'],
  },
  down: {
    summary: 'remove the socket proxy of up; --all removes every sandbox first',
    usage: 'down [--all]',
    description: `Stops and removes the socket proxy container that up started, and its socket. Sandboxes stay
and keep running (it says how many); --all first destroys every sandbox (container, egress proxy,
network, ephemeral volumes, as destroy does) and then the shared network when nothing else uses it.
Persistent workspaces (cap-ws.*) are kept. Talks to the engine itself (--endpoint, default the local socket).`,
    arguments: [],
    options: [
      ['--all', 'destroy every sandbox (only those with each --label, when given) and the shared network too'],
      ['--label KEY=VALUE', 'with --all: only the sandboxes carrying this label (repeatable)'],
    ],
    examples: ['sudo capybara-sandbox down', 'sudo capybara-sandbox down --all'],
  },
  create: {
    summary: 'create sandbox NAME (refused when it exists)',
    usage: 'create NAME [sandbox options]',
    description: 'Creates sandbox NAME through the socket proxy and prints its name; refused when it already exists.',
    arguments: [NAME_ARG],
    options: SANDBOX_OPTIONS,
    examples: ['capybara-sandbox create demo --allow pypi.org --allow files.pythonhosted.org'],
  },
  run: {
    summary: 'run COMMAND in sandbox NAME, creating it first when it does not exist',
    usage: 'run NAME [sandbox options] [--rm] [--report] [--timeout 10m] [-i] [-t] -- COMMAND...',
    description: `Creates NAME with the sandbox options when it does not exist (refused when it exists with other
options), runs COMMAND as the sandbox user, prints its output as it comes and exits with its exit code.
With --report NAME must not exist: it is made for this run with its egress proxy in report mode
(what only the allowlist would refuse passes, logged would_deny; private and reserved addresses
are still refused), COMMAND's output goes to stderr, and once it ends the sandbox is stopped, the
allowHosts policy file the run needed is printed on stdout (as capybara-egress report makes it),
and the sandbox is destroyed. The exit code is still COMMAND's. Reading the decisions needs the
engine itself (as logs does): the local engine socket, or a tcp:// engine.`,
    arguments: [NAME_ARG, COMMAND_ARG],
    options: [
      ...SANDBOX_OPTIONS,
      ['--rm', 'destroy the sandbox after the command'],
      ['--report', 'learn the allowlist: a new sandbox whose egress proxy reports instead of refusing; the policy it needed on stdout, the command\'s output on stderr; destroyed after'],
      TIMEOUT,
      ...STREAMS,
    ],
    examples: [
      'capybara-sandbox run demo --allow pypi.org --rm -- pip download requests',
      'sudo capybara-sandbox run learn --report -- pip download requests > allow.yaml',
    ],
  },
  ls: {
    summary: 'list the sandboxes (engine host): name, state, tier, age, image, egress proxy',
    usage: 'ls [-q] [--format table|json] [--filter KEY=VALUE]...',
    description: `Every sandbox container (labelled dev.capybara.sandbox=1) with its state, tier, age, image and
egress proxy state. Needs the engine itself: the socket proxy refuses listing by design.`,
    arguments: [],
    options: [
      ['-q, --quiet', 'names only, one per line'],
      ['--format FORMAT', `${LS_FORMATS.join(' | ')}: the table (default) or one JSON array of the rows (as --json)`],
      ['--filter label=KEY[=VALUE]', 'only sandboxes carrying that label (with that value); several add up'],
      ['--filter status=STATE', `only sandboxes in that state: ${LS_STATUSES.join(', ')}; several statuses are alternatives`],
      ['--label KEY=VALUE', 'as --filter label=KEY=VALUE'],
    ],
    examples: ['capybara-sandbox ls --filter status=exited -q', 'capybara-sandbox ls --format json --filter label=team=ml'],
  },
  inspect: {
    summary: 'one sandbox: state, tier, allowlist, image, egress proxy, network, volumes, limits',
    usage: 'inspect NAME',
    description: 'Shows one sandbox: state, tier, allowlist, image, runtime, egress proxy, network, subnet, volumes and limits.',
    arguments: [NAME_ARG],
    options: [],
    examples: ['capybara-sandbox inspect demo', 'capybara-sandbox --json inspect demo'],
  },
  logs: {
    summary: 'the egress decisions of one sandbox: allowed and denied requests, tunnel bytes; -f follows',
    usage: 'logs NAME [-f|--follow] [--denied]',
    description: `Prints the decisions of the sandbox's egress proxy, one line each: time, allowed/denied, method and
host:port, the reason and its detail for a refusal, bytes up and down when known; a tunnel's close
line has its bytes and duration. Read from the proxy's container log through the engine itself
(--endpoint, default the local socket; the socket proxy has no log route). With --json, the proxy's
own JSON records (decision, tunnel_closed, decision_lines_suppressed), one a line. Exit 1 "no such
sandbox" when it does not exist, or when it goes away while -f follows; Ctrl-C ends -f with 0.`,
    arguments: [NAME_ARG],
    options: [
      ['-f, --follow', 'keep printing new decisions as they are made, until Ctrl-C'],
      ['--denied', 'refusals only (and the count of refusals over the log-line rate)'],
    ],
    examples: ['sudo capybara-sandbox logs demo -f', 'sudo capybara-sandbox logs demo --denied', 'sudo capybara-sandbox --json logs demo'],
  },
  exec: {
    summary: 'run COMMAND in an existing sandbox and exit with its exit code',
    usage: 'exec NAME [--timeout 10m] [-i] [-t] -- COMMAND...',
    description: `Runs COMMAND as the sandbox user (bash, uid 1000) in an existing sandbox, starting it when stopped;
prints its output as it comes (with --json, one result at the end) and exits with its exit code.
Ctrl-C (without -t -i) or SIGTERM kills the command in the sandbox, then exits 130 or 143.`,
    arguments: [NAME_ARG, COMMAND_ARG],
    options: [TIMEOUT, ...STREAMS],
    examples: ['capybara-sandbox exec demo -- python3 -c \'print(1)\'', 'capybara-sandbox exec -it demo -- bash', 'printf \'a\\nb\\n\' | capybara-sandbox exec -i demo -- sort'],
  },
  allow: {
    summary: 'add hosts to a running sandbox\'s allowlist, in force within a second',
    usage: 'allow NAME HOST...',
    description: `Adds each HOST (example.com, or *.example.com for the names below it) to the allowlist of an
allowlist sandbox while it runs, checked as at create: a host the egress proxy would refuse
changes nothing. New connections and DNS answers get the new list within a second. Prints the
allowlist now in force. A sandbox with secrets or inspected hosts keeps the list it was made with
(exit 1, allowlist_fixed).`,
    arguments: [NAME_ARG, ['HOST...', 'host names to allow']],
    options: [],
    examples: ['capybara-sandbox allow demo pypi.org files.pythonhosted.org', 'capybara-sandbox --json allow demo \'*.npmjs.org\''],
  },
  deny: {
    summary: 'drop hosts from a running sandbox\'s allowlist; open connections to them are closed',
    usage: 'deny NAME HOST...',
    description: `Drops each HOST, written as it is in the allowlist, from the allowlist of an allowlist sandbox
while it runs. Within a second new connections and DNS answers for it are refused, and the open
tunnels and keep-alive connections to it are closed. Prints the allowlist now in force.`,
    arguments: [NAME_ARG, ['HOST...', 'allowlist entries to drop']],
    options: [],
    examples: ['capybara-sandbox deny demo pypi.org'],
  },
  destroy: {
    summary: 'remove a sandbox, its egress proxy, network and ephemeral volumes',
    usage: 'destroy [-f|--force] NAME',
    description: `Removes the sandbox and its egress proxy, network and ephemeral volumes (a persistent workspace
stays). A sandbox on a shard of the shared egress leaves the shard (its registration ends, the
shard stays for the others). A sandbox that does not exist exits 1, "no such sandbox".`,
    arguments: [NAME_ARG],
    options: [['-f, --force', 'a sandbox that does not exist is no error (exit 0, as docker rm -f)']],
    examples: ['capybara-sandbox destroy demo'],
  },
  gc: {
    summary: 'remove orphans and half-built sandboxes (engine host)',
    usage: 'gc [--dry-run] [--min-age 10m]',
    description: `Removes an egress proxy, network or volume whose sandbox container is gone, and all of a sandbox
whose create never finished (its controller died), when older than --min-age. Persistent
workspaces (cap-ws.*) and live sandboxes are never removed. Needs the engine itself.`,
    arguments: [],
    options: [
      ['--dry-run', 'only list what would be removed'],
      ['--min-age 10m', 'only what is older than this (default 10m, so a create in progress in another controller replica is never touched)'],
      ['--label KEY=VALUE', 'only resources that also carry this label (repeatable)'],
    ],
    examples: ['sudo capybara-sandbox gc --dry-run'],
  },
  doctor: {
    summary: 'check the deployment, printing each check as it finishes',
    usage: 'doctor [--image IMAGE]',
    description: `Checks the deployment through the controller's endpoint and prints each check as it finishes, with
pass, fail or skip and, on a failure, what to do. Starts and removes one throwaway sandbox
(allowlist tier). Exits 1 when a check fails.`,
    arguments: [],
    options: [
      ['--image IMAGE', `the throwaway sandbox's image (default ${DEFAULT_SANDBOX_IMAGE})`],
      ['--label KEY=VALUE', 'put this label on the throwaway sandbox; narrow the sandboxes checked (repeatable)'],
    ],
    examples: ['capybara-sandbox doctor', 'capybara-sandbox --endpoint tcp://socket-proxy:2375 doctor'],
  },
};

const GLOBAL_OPTIONS: ReadonlyArray<readonly [string, string]> = [
  ['--config FILE', 'deployment config as JSON (the plugin\'s extensionConfig."sandbox-docker" schema); without it, CAPYBARA_EXTENSION_CONFIG is read as the host reads it'],
  ['--endpoint URL', 'tcp://host:port or unix:///path. For up, down, ls, gc and logs the engine (default unix:///var/run/docker.sock); for the others the socket proxy (default: the socket of up)'],
  ['--tls-cert-dir DIR', 'ca.pem, cert.pem, key.pem for mTLS to a tcp:// engine'],
  ['--network NAME', 'shared sandbox network (overrides the config; default capybara-sandbox)'],
  ['--socket-dir DIR', `directory of the socket of up (default ${DEFAULT_SOCKET_DIR})`],
  ['--proxy-name NAME', `the socket proxy container of up and down (default ${DEFAULT_PROXY_NAME}; never cap-...)`],
  ['--proxy-image IMAGE', `its image (default ${DEFAULT_PROXY_IMAGE})`],
  ['--label KEY=VALUE', 'ls, gc, down --all: only what also carries this label; up, create, run, doctor: put it on what they create'],
  ['--json', 'machine-readable output (errors and progress lines on stderr too)'],
  ['-h, --help', 'this text; COMMAND --help for one command'],
  ['--version', 'the version (alone)'],
];

function rows(items: ReadonlyArray<readonly [string, string]>): string {
  const width = Math.max(...items.map(([k]) => k.length)) + 2;
  return items.map(([k, v]) => `  ${k.padEnd(width)}${v}`).join('\n');
}

/** `capybara-sandbox COMMAND --help`. */
export function commandHelp(command: OperatorCommand): string {
  const h = COMMAND_HELP[command];
  return [
    `capybara-sandbox ${command}: ${h.summary}`,
    '',
    'Usage:',
    `  capybara-sandbox [global options] ${h.usage}`,
    '',
    h.description,
    ...(h.arguments.length === 0 ? [] : ['', 'Arguments:', rows(h.arguments)]),
    ...(h.options.length === 0 ? [] : ['', 'Options:', rows(h.options)]),
    '',
    `Example${h.examples.length > 1 ? 's' : ''}:`,
    ...h.examples.map((e) => `  ${e}`),
    '',
    'Global options (--config, --endpoint, --json, ...): capybara-sandbox --help',
    '',
  ].join('\n');
}

export const OPERATOR_HELP = `capybara-sandbox: operator tool for the sandbox-docker deployment

Usage:
  capybara-sandbox [global options] COMMAND [arguments] [options]
  capybara-sandbox COMMAND --help     (or: capybara-sandbox help COMMAND) for one command

Commands:
${rows(OPERATOR_COMMANDS.map((c) => [c, COMMAND_HELP[c].summary]))}

Global options:
${rows(GLOBAL_OPTIONS)}

Without an endpoint anywhere, create and run start the socket proxy as up does when nothing
answers on its socket, so that the first command needs no set-up beyond the images.
The socket proxy refuses listing by design: ls and gc run against the engine itself.

Exit codes: 0 ok, 1 failure (or a failed doctor check), 2 bad usage or config; exec and run
exit with the command's code (124 when it timed out).
`;
