/**
 * Runs one `capybara-sandbox` invocation: parses the command line, loads the config, does the
 * command through the controller's engine layer or provider, and renders a table or JSON.
 * Returns the exit code instead of exiting, so tests run it in-process. Progress lines of the
 * long steps (starting the socket proxy, creating a sandbox) go to stderr, so stdout carries
 * only the result (for run: the command's own output).
 */
import pino from 'pino';
import { join } from 'node:path';
import { DockerEngine } from '../docker/index.js';
import { PIDS_LIMIT, SandboxError, isSandboxError, namesFor, type DeploymentConfig } from '../spec/index.js';
import { IMAGES, VERSION } from '../../common/index.js';
import { createDockerSandbox } from '../index.js';
import { shardOfLabels } from '../sandbox/index.js';
import { parseOperatorArgs, type OperatorArgs } from './args.js';
import { commandHelp, OPERATOR_HELP } from './help.js';
import { lsOutput } from './ls-options.js';
import { destroyAllSandboxes, downLines, type DownAllResult } from './down-all.js';
import { egressTestHostsFromEnv, engineSocketFor, loadOperatorConfig, localEngineEndpoint, PROXY_SOCKET_FILE, upSocketDir, type OperatorConfig } from './operator-config.js';
import { labelFilters, readInventory, sandboxRows } from './inventory.js';
import { inspectSandbox } from './sandbox-detail.js';
import { collectGarbage } from './gc.js';
import { runDoctor, type DoctorCheck } from './doctor.js';
import { age, asciiJson, table, terminalText } from './render.js';
import type { SocketProxySettings } from './socket-proxy-spec.js';
import { proxyAnswers, requirePrivateSocketPath, socketProxyDown, socketProxyUp, type UpResult } from './socket-proxy-service.js';
import { createSandbox, ensureSandbox } from './sandbox-commands.js';
import { runLogs } from './logs-command.js';
import { runExecCommand, type ExecCommandArgs, type ExecTerminal } from './exec-command.js';
import { reportRun } from './run-report.js';
import { sandboxSpec } from './sandbox-options.js';

export interface OperatorIo {
  /** Writes `text`; a promise back asks a writer that can wait (logs) to wait for it before more. */
  readonly stdout: (text: string) => unknown;
  readonly stderr: (text: string) => void;
  readonly now?: () => number;
  /** The environment to read (default process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** Calls `handler` on SIGINT until the returned function is called (logs -f ends on it with 0). */
  readonly onInterrupt?: (handler: () => void) => () => void;
  /** The CLI's own streams: exec and run write a command's output there as bytes, and read -i's stdin. */
  readonly terminal?: ExecTerminal;
}

/**
 * Human output escaped for a terminal (render.ts terminalText): gc and down --all print what the
 * labels of anything listed say, and dockerd merges an image's labels into its container's, so
 * an image's author chose those bytes.
 */
function print(io: OperatorIo, args: OperatorArgs, json: unknown, human: string): void {
  io.stdout(args.json ? `${asciiJson(json, 2)}\n` : terminalText(human));
}

function execArgs(args: OperatorArgs, config: DeploymentConfig): ExecCommandArgs {
  return { json: args.json, interactive: args.interactive, tty: args.tty, fresh: args.fresh, timeoutMs: args.timeoutMs, maxOutputBytes: config.maxLimits.outputBytes };
}

/**
 * The socket proxy for this deployment: it admits the sandbox image of the command, the project's
 * own, the deployment's allowedImages and its egress proxy image, and the deployment's ceilings.
 */
function proxySettings(args: OperatorArgs, config: DeploymentConfig, env: NodeJS.ProcessEnv, sandboxImage: string): SocketProxySettings {
  return {
    name: args.proxyName,
    image: args.proxyImage,
    socketDir: args.socketDir,
    engineSocket: engineSocketFor(args, env),
    sharedNetwork: config.network,
    volumeDriver: config.volumeDriver,
    images: [...new Set([IMAGES.sandbox, sandboxImage, ...(config.allowedImages ?? []), config.egressProxyImage])],
    ceilings: { pids: PIDS_LIMIT, memoryMb: config.maxLimits.memoryMb, cpus: config.maxLimits.cpu },
    labels: { ...args.labels },
  };
}

function upLines(r: UpResult, config: DeploymentConfig): string {
  const verb = { reused: 'already running', started: 'started', created: 'started', recreated: 'recreated and started' }[r.action];
  return [
    `socket proxy ${r.container}: ${verb} (${(r.ms / 1000).toFixed(1)} s)`,
    `images: ${r.images.join(', ')} present`,
    `endpoint: ${r.endpoint}`,
    `the plugin's config: extensionConfig."sandbox-docker" = ${JSON.stringify({ endpoint: r.endpoint, network: config.network })}`,
    '',
  ].join('\n');
}

/**
 * What destroy says it removed: a sandbox on a shard of the shared egress left the shard (which
 * stays for the others); one with a proxy of its own took it along; none at all (--force) nothing.
 */
export function destroyedLine(name: string, existed: boolean, shard: string | undefined): string {
  if (!existed) return `no sandbox ${name}: nothing to destroy\n`;
  if (shard !== undefined) return `destroyed ${name} (container, network, ephemeral volumes; its registration on the egress shard ${shard}, which stays for the other sandboxes)\n`;
  return `destroyed ${name} (container, egress proxy, network, ephemeral volumes)\n`;
}

async function dispatch(args: OperatorArgs, loaded: OperatorConfig, io: OperatorIo, env: NodeJS.ProcessEnv): Promise<number> {
  // No warm network slots in a CLI process: it ends after one command, and the networks its pool
  // would make after a create would wait for nobody (gc removes them only after half an hour).
  const config = { ...loaded.config, warmSlots: 0 };
  // Every command that talks to the socket of up (or manages it) first makes sure nobody but root
  // could have put another socket there since up made it.
  const socketDir = upSocketDir(args, config);
  if (socketDir !== undefined) requirePrivateSocketPath(socketDir);
  const now = io.now ?? Date.now;
  // With --json every stderr line is a JSON object, the progress lines included.
  const progress = (line: string): void => io.stderr(args.json ? `${asciiJson({ progress: line })}\n` : `capybara-sandbox: ${terminalText(line)}\n`);
  const logger = pino({ name: 'capybara-sandbox', level: 'warn' }, pino.destination(2));
  const engine = new DockerEngine({ endpoint: config.endpoint, tlsCertDir: config.tlsCertDir, logger });
  const testHosts = args.command === 'create' || args.command === 'run' ? egressTestHostsFromEnv(env) : undefined;
  if (testHosts !== undefined) progress(`test hosts pinned for new egress proxies: ${JSON.stringify(testHosts)} (tests only)`);
  const provider = (): ReturnType<typeof createDockerSandbox> =>
    createDockerSandbox(config, { labels: { ...args.labels }, ...(testHosts === undefined ? {} : { egressTestHosts: testHosts }) }, { logger, env });
  // Nothing was configured: the socket of up is the endpoint, and it is started on demand.
  const startProxyIfNeeded = async (): Promise<void> => {
    if (!loaded.proxyOnDemand || (await proxyAnswers(join(args.socketDir, PROXY_SOCKET_FILE)))) return;
    progress(`no socket proxy answers on ${config.endpoint}; starting one (capybara-sandbox up)`);
    const r = await socketProxyUp(proxySettings(args, config, env, args.sandbox.image), [args.sandbox.image, config.egressProxyImage], progress);
    progress(`socket proxy ${r.container} answers on ${r.endpoint} (${(r.ms / 1000).toFixed(1)} s)`);
  };
  switch (args.command) {
    case 'up': {
      const r = await socketProxyUp(proxySettings(args, config, env, args.image), [args.image, config.egressProxyImage], progress);
      print(io, args, r, upLines(r, config));
      return 0;
    }
    case 'down': {
      const engineSocket = engineSocketFor(args, env);
      let all: DownAllResult | undefined;
      if (args.all) {
        // The sandboxes first, through the controller's destroy on the engine itself.
        const direct = new DockerEngine({ endpoint: `unix://${engineSocket}`, logger });
        const onEngine = createDockerSandbox({ ...config, endpoint: `unix://${engineSocket}`, tlsCertDir: undefined }, { labels: { ...args.labels } }, { logger, engine: direct });
        all = await destroyAllSandboxes({ engine: direct, provider: onEngine, sharedNetwork: config.network, labels: args.labels, progress });
      }
      const r = await socketProxyDown(engineSocket, args.proxyName, args.socketDir, labelFilters(args.labels));
      print(io, args, all === undefined ? r : { ...r, ...all }, downLines(r, all));
      return all !== undefined && all.failed.length > 0 ? 1 : 0;
    }
    case 'create': {
      await startProxyIfNeeded();
      const r = await createSandbox({ provider: provider(), engine, sharedNetwork: config.network, progress }, args.name ?? '', args.sandbox);
      print(io, args, { name: r.handle.id, ms: r.ms }, `${r.handle.id}\n`);
      return 0;
    }
    case 'run': {
      await startProxyIfNeeded();
      if (args.report) {
        // The decisions are read from the proxy's container log, which only the engine itself serves.
        const logEngine = config.endpoint.startsWith('unix://') ? new DockerEngine({ endpoint: localEngineEndpoint(env), logger }) : engine;
        // Before anything runs: a report that cannot be read would waste the whole run.
        if (logEngine !== engine) {
          await logEngine.ping().catch((err: unknown) => {
            throw new SandboxError('engine_unavailable', `run --report reads the egress proxy's log through the engine itself, and ${localEngineEndpoint(env)} does not answer (${(err as Error).message}); run it on the engine host, as root`, { cause: err });
          });
        }
        const reportProvider = createDockerSandbox(config, { labels: { ...args.labels }, egressMode: 'report', ...(testHosts === undefined ? {} : { egressTestHosts: testHosts }) }, { logger, env });
        const name = args.name ?? '';
        return reportRun({ provider: reportProvider, engine, logEngine, progress }, { name, spec: sandboxSpec(name, args.sandbox), command: args.execCommand ?? '', exec: execArgs(args, config) }, io);
      }
      const p = provider();
      const { handle } = await ensureSandbox({ provider: p, engine, sharedNetwork: config.network, progress }, args.name ?? '', args.sandbox);
      try {
        return await runExecCommand((opts) => p.exec(handle, args.execCommand ?? '', opts), execArgs(args, config), io);
      } finally {
        if (args.remove) {
          await p.destroy(handle);
          progress(`${handle.id} destroyed (--rm)`);
        }
      }
    }
    case 'ls': {
      // Its TIER is a label too (print above).
      io.stdout(terminalText(lsOutput(sandboxRows(await readInventory(engine, args.labels, 'ls', args.ls.labels), now(), config.network), args.ls, args.json)));
      return 0;
    }
    case 'inspect': {
      const d = await inspectSandbox(engine, args.name ?? '', config.network);
      print(io, args, d, table(['FIELD', 'VALUE'], [
        ['name', d.name], ['state', d.state], ['tier', d.tier], ['image', d.image], ['runtime', d.runtime],
        ['allow-hosts', d.allowHosts.join(',') || '-'], ['egress-proxy', d.egress], ['network', d.network], ['subnet', d.subnet],
        ['volumes', d.volumes.join(',')], ['cpus', String(Number(d.limits.nanoCpus) / 1e9)],
        ['memory-mb', String(Number(d.limits.memory) / 1024 / 1024)], ['pids-limit', String(d.limits.pidsLimit)],
      ]));
      return 0;
    }
    case 'logs':
      return runLogs(engine, args.name ?? '', config.network, { ...args.logs, json: args.json }, { stdout: io.stdout, note: progress, onInterrupt: io.onInterrupt });
    case 'exec': {
      const p = provider();
      return runExecCommand((opts) => p.exec({ id: args.name ?? '' }, args.execCommand ?? '', opts), execArgs(args, config), io);
    }
    case 'allow':
    case 'deny': {
      const name = args.name ?? '';
      const change = args.command === 'allow' ? { allow: [...args.hosts] } : { deny: [...args.hosts] };
      const allowHosts = await provider().changeAllowHosts({ id: name }, change);
      print(io, args, { name, allowHosts }, `allowlist of ${name}: ${allowHosts.join(', ') || '(empty: nothing is reached)'}\n`);
      return 0;
    }
    case 'destroy': {
      const name = args.name ?? '';
      const view = await engine.inspectContainer(name);
      const existed = view !== undefined || (await engine.inspectContainer(namesFor(name).egress)) !== undefined;
      // Whatever is left of it (a network, volumes) goes either way.
      await provider().destroyByName(name);
      if (!existed && !args.force) throw new SandboxError('not_found', `no such sandbox ${name}: nothing to destroy (--force makes that exit 0, as docker rm -f does)`);
      print(io, args, { destroyed: name }, destroyedLine(name, existed, view === undefined ? undefined : shardOfLabels(view.labels, config.network)?.name));
      return 0;
    }
    case 'gc': {
      const results = await collectGarbage(engine, { dryRun: args.dryRun, minAgeMs: args.minAgeMs, extraLabels: args.labels, nowMs: now(), sharedNetwork: config.network });
      const human = results.length === 0
        ? 'no orphans\n'
        : table(['ACTION', 'KIND', 'NAME', 'SANDBOX', 'AGE', 'DETAIL'], results.map((r) => [r.action, r.kind, r.name, r.sandbox ?? '-', age(r.ageSeconds), r.detail ?? '']));
      print(io, args, results, human);
      return results.some((r) => r.action === 'failed') ? 1 : 0;
    }
    case 'doctor': {
      // Listing needs the engine itself: the one on this host, when the endpoint is a socket here
      // (the socket proxy of up, or the engine); a tcp endpoint may be another host's engine.
      const local = config.endpoint.startsWith('unix://') ? new DockerEngine({ endpoint: localEngineEndpoint(env), logger }) : undefined;
      const listSandboxes = local === undefined ? undefined : async () => sandboxRows(await readInventory(local, args.labels, 'doctor'), now(), config.network);
      // Each check's line as it finishes (a run takes about 25 s); --json stays one document.
      const onCheck = args.json ? undefined : (c: DoctorCheck): void => void io.stdout(`[${c.status.toUpperCase()}] ${c.check}: ${c.detail}${c.fix === undefined ? '' : `\n       fix: ${c.fix}`}\n`);
      const checks = await runDoctor({ config, engine, provider: provider(), image: args.image, labels: args.labels, listSandboxes, ...(onCheck === undefined ? {} : { onCheck }) });
      if (args.json) print(io, args, checks, '');
      return checks.some((c) => c.status === 'fail') ? 1 : 0;
    }
    default:
      return 2;
  }
}

export async function runOperator(argv: readonly string[], io: OperatorIo): Promise<number> {
  let jsonErrors = argv.includes('--json');
  const env = io.env ?? process.env;
  let proxyOnDemand = false;
  try {
    if (argv.length === 1 && argv[0] === '--version') {
      io.stdout(`capybara-sandbox ${VERSION}\n`);
      return 0;
    }
    const args = parseOperatorArgs(argv);
    jsonErrors = args.json;
    if (args.help) {
      io.stdout(args.command === undefined ? OPERATOR_HELP : commandHelp(args.command));
      return 0;
    }
    const loaded = loadOperatorConfig(args, env);
    proxyOnDemand = loaded.proxyOnDemand && args.command !== 'up' && args.command !== 'down';
    return await dispatch(args, loaded, io, env);
  } catch (err) {
    const code = isSandboxError(err) ? err.code : 'internal_error';
    // Nothing was configured and nothing answers on the socket of up: say how to start it.
    const hint = proxyOnDemand && code === 'engine_unavailable' ? ' Start the socket proxy first: capybara-sandbox up (create and run do it themselves).' : '';
    const message = `${(err as Error).message}${hint}`;
    io.stderr(jsonErrors ? `${asciiJson({ error: { code, message } })}\n` : `capybara-sandbox: ${code}: ${terminalText(message)}\n`);
    return isSandboxError(err, 'invalid_config') ? 2 : 1;
  }
}
