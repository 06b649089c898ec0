/**
 * Runs one `capybara-sandbox` invocation: parses the command line, loads the config, does the
 * command through the controller's engine layer or provider, and renders a table or JSON.
 * Returns the exit code instead of exiting, so tests run it in-process.
 */
import pino from 'pino';
import { DockerEngine } from '../engine.js';
import { isSandboxError } from '../errors.js';
import { createDockerSandbox } from '../provider.js';
import type { DeploymentConfig } from '../config.js';
import { OPERATOR_HELP, parseOperatorArgs, type OperatorArgs } from './args.js';
import { loadOperatorConfig } from './operator-config.js';
import { readInventory, sandboxRows } from './inventory.js';
import { inspectSandbox } from './sandbox-detail.js';
import { collectGarbage } from './gc.js';
import { runDoctor } from './doctor.js';
import { age, table } from './render.js';

export interface OperatorIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly now?: () => number;
}

/** Exit code of exec when the command was ended by its timeout, as timeout(1) does. */
const EXIT_TIMED_OUT = 124;
const EXIT_NO_CODE = 125;

function print(io: OperatorIo, args: OperatorArgs, json: unknown, human: string): void {
  io.stdout(args.json ? `${JSON.stringify(json, null, 2)}\n` : human);
}

async function dispatch(args: OperatorArgs, config: DeploymentConfig, io: OperatorIo): Promise<number> {
  const now = io.now ?? Date.now;
  const logger = pino({ name: 'capybara-sandbox', level: 'warn' }, pino.destination(2));
  const engine = new DockerEngine({ endpoint: config.endpoint, tlsCertDir: config.tlsCertDir, logger });
  const provider = (): ReturnType<typeof createDockerSandbox> => createDockerSandbox(config, { labels: { ...args.labels } }, { logger });
  switch (args.command) {
    case 'ls': {
      const rows = sandboxRows(await readInventory(engine, args.labels, 'ls'), now());
      print(io, args, rows, table(['NAME', 'STATE', 'TIER', 'AGE', 'IMAGE', 'EGRESS'], rows.map((r) => [r.name, r.state, r.tier, age(r.ageSeconds), r.image, r.egress])));
      return 0;
    }
    case 'inspect': {
      const d = await inspectSandbox(engine, args.name ?? '');
      print(io, args, d, table(['FIELD', 'VALUE'], [
        ['name', d.name], ['state', d.state], ['tier', d.tier], ['image', d.image], ['runtime', d.runtime],
        ['allow-hosts', d.allowHosts.join(',') || '-'], ['egress-proxy', d.egress], ['network', d.network],
        ['volumes', d.volumes.join(',')], ['cpus', String(Number(d.limits.nanoCpus) / 1e9)],
        ['memory-mb', String(Number(d.limits.memory) / 1024 / 1024)], ['pids-limit', String(d.limits.pidsLimit)],
      ]));
      return 0;
    }
    case 'exec': {
      const r = await provider().exec({ id: args.name ?? '' }, args.execCommand ?? '', args.timeoutMs === undefined ? {} : { timeoutMs: args.timeoutMs });
      const code = r.exitCode ?? (r.timedOut ? EXIT_TIMED_OUT : EXIT_NO_CODE);
      if (args.json) {
        io.stdout(`${JSON.stringify({ ...r }, null, 2)}\n`);
      } else {
        io.stdout(r.stdout);
        io.stderr(r.stderr);
        if (r.truncated) io.stderr('capybara-sandbox: output was truncated at the output cap\n');
        if (r.timedOut) io.stderr('capybara-sandbox: the command timed out and was killed\n');
      }
      return code;
    }
    case 'destroy': {
      const name = args.name ?? '';
      await provider().destroyByName(name);
      print(io, args, { destroyed: name }, `destroyed ${name} (container, egress proxy, network, ephemeral volumes)\n`);
      return 0;
    }
    case 'gc': {
      const results = await collectGarbage(engine, { dryRun: args.dryRun, minAgeMs: args.minAgeMs, extraLabels: args.labels, nowMs: now() });
      const human = results.length === 0
        ? 'no orphans\n'
        : table(['ACTION', 'KIND', 'NAME', 'SANDBOX', 'AGE', 'DETAIL'], results.map((r) => [r.action, r.kind, r.name, r.sandbox ?? '-', age(r.ageSeconds), r.detail ?? '']));
      print(io, args, results, human);
      return results.some((r) => r.action === 'failed') ? 1 : 0;
    }
    case 'doctor': {
      const checks = await runDoctor({ config, engine, provider: provider(), image: args.image, labels: args.labels });
      const human = checks.map((c) => `[${c.status.toUpperCase()}] ${c.check}: ${c.detail}${c.fix === undefined ? '' : `\n       fix: ${c.fix}`}`).join('\n') + '\n';
      print(io, args, checks, human);
      return checks.some((c) => c.status === 'fail') ? 1 : 0;
    }
    default:
      return 2;
  }
}

export async function runOperator(argv: readonly string[], io: OperatorIo): Promise<number> {
  let jsonErrors = argv.includes('--json');
  try {
    const args = parseOperatorArgs(argv);
    jsonErrors = args.json;
    if (args.help) {
      io.stdout(OPERATOR_HELP);
      return 0;
    }
    const config = loadOperatorConfig(args);
    return await dispatch(args, config, io);
  } catch (err) {
    const code = isSandboxError(err) ? err.code : 'internal_error';
    const message = (err as Error).message;
    io.stderr(jsonErrors ? `${JSON.stringify({ error: { code, message } })}\n` : `capybara-sandbox: ${code}: ${message}\n`);
    return isSandboxError(err, 'invalid_config') ? 2 : 1;
  }
}
