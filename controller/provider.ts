/**
 * `createDockerSandbox`: validates the deployment config once and wires the engine, the
 * lifecycle, commands and file operations into a `sandbox@1` provider.
 */
import pino, { type Logger } from 'pino';
import type { AllowlistChange, SandboxHandle, SandboxProvider, DeploymentConfigInput } from './spec/index.js';
import { SandboxError, TIERS, checkSandboxName, parseDeploymentConfig, persistentWorkspaceVolume, planSandbox, printableAsciiMap, withCredentials } from './spec/index.js';
import { DockerEngine, checkCreateBodies, engineStatus, isEngineStatusError, type EgressMode, type SandboxEngine } from './docker/index.js';
import { CredentialSource, SandboxLanes, SandboxLifecycle, SandboxRecovery, changeAllowHosts, readSandboxEgressUsage, workspaceLane, type EgressUsage } from './sandbox/index.js';
import { CommandRunner, FileOps, type WithRunning } from './exec/index.js';

/** The `sandbox@1` provider plus what only this Docker implementation can tell. */
export interface DockerSandboxProvider extends SandboxProvider {
  /**
   * Egress totals of an allowlist sandbox (bytes each way, decisions by outcome and reason): since
   * its egress proxy last started, or on a shard since its registration began; null when the
   * sandbox has no running egress proxy.
   */
  egressUsage(h: SandboxHandle): Promise<EgressUsage | null>;
  /**
   * Changes a running allowlist sandbox's allowlist: `allow` adds hosts, `deny` drops them
   * (entries checked as at create; an invalid change changes nothing). In force for new
   * connections and DNS answers within a second; open connections to a dropped host are closed.
   * Resolves with the allowlist now in force. `allowlist_fixed` for a sandbox whose proxy takes its
   * policy from its environment (secrets, inspected hosts, or made before live allowlists).
   */
  changeAllowHosts(h: SandboxHandle, change: AllowlistChange): Promise<string[]>;
  /**
   * With `warmSlots` (and `egressIsolation: shared`): makes warm networks until that many are
   * ready, and resolves with the number ready (fewer when one could not be made; the log says
   * why). Creates refill the pool themselves; this only has it full before the first one.
   */
  warmUp(): Promise<number>;
  /** Removes the warm networks ready now and those being made (a controller about to stop); creates after it make their own until warmUp. */
  drainWarm(): Promise<void>;
}

/** Only for code that calls `createDockerSandbox` directly; plugin config cannot set these. */
export interface SandboxTestOptions {
  /** Extra labels on every resource (tests clean up by label). */
  labels?: Record<string, string>;
  /** Host → IP pins for the egress proxy; exempt from its private-address check. */
  egressTestHosts?: Record<string, string>;
  /**
   * `report`: the egress proxies this provider creates or rebuilds allow what only the allowlist
   * refuses and log it would_deny (capybara-sandbox run --report, on a sandbox made for that run).
   */
  egressMode?: EgressMode;
}

export interface SandboxRuntimeOptions {
  logger?: Logger;
  /**
   * The engine to use instead of a DockerEngine on the configured endpoint (the tests' in-memory
   * engine). The config is still parsed and checked in full.
   */
  engine?: SandboxEngine;
  /** The controller's environment, where secrets' values are read (default process.env). */
  env?: NodeJS.ProcessEnv;
}

function handleName(h: SandboxHandle): string {
  if (typeof h !== 'object' || h === null) throw new SandboxError('invalid_spec', 'A sandbox handle ({ id }) is required.');
  return checkSandboxName(h.id);
}

export function createDockerSandbox(
  config: DeploymentConfigInput,
  testOptions: SandboxTestOptions = {},
  runtime: SandboxRuntimeOptions = {},
): DockerSandboxProvider {
  const parsed = parseDeploymentConfig(config);
  // Checked here, once, for every create body they go into.
  const extraLabels = printableAsciiMap(testOptions.labels, 'testOptions.labels');
  const egressTestHosts = testOptions.egressTestHosts === undefined ? undefined : printableAsciiMap(testOptions.egressTestHosts, 'testOptions.egressTestHosts');
  const logger = runtime.logger ?? pino({ name: 'sandbox-docker', level: 'warn' }, pino.destination(2));
  const engine = runtime.engine ?? new DockerEngine({ endpoint: parsed.endpoint, tlsCertDir: parsed.tlsCertDir, logger });
  const egressMode = testOptions.egressMode ?? 'enforce';
  if (egressMode !== 'enforce' && egressMode !== 'report') throw new SandboxError('invalid_config', `testOptions.egressMode must be enforce or report, got ${JSON.stringify(egressMode)}`);
  const credentials = new CredentialSource(parsed, { env: runtime.env ?? process.env });
  const buildDeps = { engine, config: parsed, extraLabels, egressTestHosts, logger, egressMode, credentials };
  const lifecycle = new SandboxLifecycle(buildDeps);
  const lanes = new SandboxLanes();
  const recovery = new SandboxRecovery(buildDeps, lanes);
  const destroy = (name: string): Promise<void> => lanes.run(name, () => lifecycle.destroy(name));

  const withRunning: WithRunning = async (name, fn) => {
    await recovery.ensureRunning(name);
    try {
      return await fn();
    } catch (err) {
      // 409: stopped or paused between the check and the call (host restart, docker pause).
      if (engineStatus(err) !== 409) throw await changedMeanwhile(name, err);
      await recovery.ensureRunning(name);
      return fn().catch(async (again: unknown) => { throw await changedMeanwhile(name, again); });
    }
  };
  /**
   * An engine failure of a call on a container that was running when the call began: when the
   * container is now gone, stopped or being removed, another call (a destroy or suspend in another
   * controller process) explains it, whatever words the engine chose ("Removal In Progress",
   * "No such container"), and the result is `conflict`. An engine that cannot say leaves `err`.
   */
  const changedMeanwhile = async (name: string, err: unknown): Promise<unknown> => {
    // Only Docker's own answers: the socket proxy's refusal is never a race.
    if (!isEngineStatusError(err) || err.byProxy) return err;
    const now = await engine.inspectContainer(name).catch(() => 'unknown' as const);
    if (now === 'unknown' || (now !== undefined && now.running && now.status !== 'removing')) return err;
    return new SandboxError('conflict', `${name} was stopped or removed by another call while this call ran (${(err as Error).message}); retry.`, { cause: err });
  };
  const restart = (name: string): Promise<void> =>
    lanes.run(name, async () => {
      // Queued behind a suspend or a destroy, the processes it was to end are gone already.
      if ((await engine.inspectContainer(name))?.running === true) await engine.restartContainer(name);
    });
  const commands = new CommandRunner({ engine, withRunning, restart, logger, ceilings: parsed.maxLimits, isolation: parsed.commandIsolation });
  const files = new FileOps({
    engine,
    withRunning,
    withRoom: (name, attempt, failureOf) => commands.withRoom(name, attempt, failureOf),
    maxReadBytes: parsed.maxLimits.readBytes,
    isolation: parsed.commandIsolation,
  });

  return Object.freeze({
    concurrentExec: true as const,
    async create(spec) {
      const planned = planSandbox(spec, parsed, { extraLabels });
      checkCreateBodies(planned, egressTestHosts, parsed.egressIsolation === 'shared');
      await lanes.run(planned.names.name, async () => {
        // In the lane: a destroy called after this create still comes after it.
        const plan = withCredentials(planned, TIERS[planned.tier].egressProxy ? await credentials.forSandbox(planned.allowHosts) : undefined);
        if (plan !== planned) checkCreateBodies(plan, egressTestHosts, parsed.egressIsolation === 'shared');
        // And in its persistent workspace's lane, if it has one (sandbox-lanes.ts).
        await (plan.persistentWorkspace === undefined ? lifecycle.create(plan) : lanes.run(workspaceLane(plan.workspaceVolume), () => lifecycle.create(plan)));
      });
      return { id: planned.names.name };
    },
    // Every method is async: a bad handle or argument is a rejected promise, never a throw out of
    // the call, which a host that only catches the promise would not see (and a throw from a
    // timer's callback ends its process).
    suspend: async (h) => {
      const name = handleName(h);
      return lanes.run(name, () => lifecycle.suspend(name));
    },
    resume: async (h) => recovery.resume(handleName(h)),
    destroy: async (h) => destroy(handleName(h)),
    destroyByName: async (name) => destroy(checkSandboxName(name)),
    exec: async (h, command, opts) => commands.exec(handleName(h), command, opts),
    readFile: async (h, path, opts) => files.readFile(handleName(h), path, opts?.maxBytes),
    writeFile: async (h, path, data) => files.writeFile(handleName(h), path, data),
    stat: async (h, path) => files.stat(handleName(h), path),
    killAll: async (h) => {
      await commands.killAll(handleName(h));
    },
    killTagged: async (h, tags) => commands.killTagged(handleName(h), tags),
    destroyWorkspace: async (key) => {
      const volume = persistentWorkspaceVolume(key);
      return lanes.run(workspaceLane(volume), () => lifecycle.destroyWorkspace(volume));
    },
    egressUsage: async (h) => readSandboxEgressUsage(engine, handleName(h), parsed.network),
    changeAllowHosts: async (h, change) => changeAllowHosts({ engine, lanes, sharedNetwork: parsed.network, config: parsed, ensureRunning: (name) => recovery.ensureRunning(name) }, handleName(h), change),
    warmUp: async () => lifecycle.warm.fill(),
    drainWarm: async () => lifecycle.warm.drain(),
  } satisfies DockerSandboxProvider);
}
