/**
 * Creating, recovering, suspending and removing the Docker objects of one sandbox. Recovery
 * (resume and the auto-start before exec/file operations) never execs into a paused
 * container: on Docker 20.10 with cgroup v1 such an exec can hang holding the container lock.
 */
import type { Logger } from 'pino';
import type { DeploymentConfig } from './config.js';
import type { DockerEngine, ContainerView } from './engine.js';
import { engineStatus } from './engine.js';
import { SandboxError } from './errors.js';
import { LABEL_ALLOW_HOSTS, LABEL_EGRESS, LABEL_NAME, namesFor, type SandboxNames } from './names.js';
import { allowHostsFromLabel, EGRESS_PROXY_PORT, type SandboxPlan } from './sandbox-plan.js';
import { egressContainerBody, sandboxBodyFromInspect, sandboxContainerBody, type EgressPlan } from './container-spec.js';
import { internalNetworkBody, sharedNetworkBody } from './network-spec.js';
import { volumeBody } from './volume-spec.js';
import { SANDBOX_USER } from './exec-script.js';

const STOP_GRACE_SECONDS = 2;
const EGRESS_READY_TIMEOUT_MS = 15_000;

export interface LifecycleDeps {
  readonly engine: DockerEngine;
  readonly config: DeploymentConfig;
  readonly extraLabels: Readonly<Record<string, string>>;
  readonly egressTestHosts: Readonly<Record<string, string>> | undefined;
  readonly logger: Logger;
}

function ignoreConflict(err: unknown): void {
  if (engineStatus(err) !== 409) throw err;
}

export class SandboxLifecycle {
  /** One recovery per sandbox at a time; concurrent callers share it. */
  private readonly recovering = new Map<string, Promise<void>>();

  constructor(private readonly deps: LifecycleDeps) {}

  async create(plan: SandboxPlan): Promise<void> {
    const { engine } = this.deps;
    const { names } = plan;
    // A stale instance (the host may have died before recording the handle) is replaced.
    await this.destroy(names.name);
    const pending: Promise<unknown>[] = [];
    try {
      // Independent steps run side by side: create-to-ready is what a conversation waits for.
      await Promise.all([
        plan.tier === 'allowlist' || plan.tier === 'open' ? this.ensureSharedNetwork() : undefined,
        plan.tier === 'allowlist' || plan.tier === 'internal' ? this.createInternalNetwork(names, plan.labels) : undefined,
        this.createVolumes(plan),
      ]);
      const sandbox = this.createContainerPullingOnce(names.container, plan.image, sandboxContainerBody(plan))
        .then(() => engine.startContainer(names.container));
      // The readiness probe runs from inside the sandbox as soon as it is up, overlapping the
      // proxy's own start.
      pending.push(plan.tier === 'allowlist' ? this.createEgress(plan) : Promise.resolve());
      pending.push(plan.tier === 'allowlist' ? sandbox.then(() => this.waitForEgress(names)) : sandbox);
      await Promise.all(pending);
    } catch (err) {
      // Removing the container also ends a probe still running; it is awaited, so no exec
      // outlives a failed create.
      await this.destroy(names.name).catch((cleanupErr: unknown) => {
        this.deps.logger.warn({ sandbox: names.name, err: cleanupErr }, 'cleanup after failed create did not finish');
      });
      await Promise.allSettled(pending);
      throw err;
    }
  }

  async suspend(name: string): Promise<void> {
    const names = namesFor(name);
    const view = await this.deps.engine.inspectContainer(name);
    if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist; create it again.`);
    // A paused container must be unpaused before it can be stopped cleanly.
    if (view.paused) await this.deps.engine.unpauseContainer(name);
    await Promise.all([
      this.deps.engine.stopContainer(names.container, STOP_GRACE_SECONDS),
      this.deps.engine.stopContainer(names.egress, STOP_GRACE_SECONDS),
    ]);
  }

  /** Brings a sandbox back to running; `gone` when its container does not exist. */
  async resume(name: string): Promise<'running' | 'gone'> {
    const view = await this.deps.engine.inspectContainer(name);
    if (view === undefined) return 'gone';
    await this.recover(name, view);
    return 'running';
  }

  /** Auto-start before a command or file operation: cheap when already running. */
  async ensureRunning(name: string): Promise<void> {
    const view = await this.deps.engine.inspectContainer(name);
    if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist (its container is gone); create it again.`);
    if (view.running && !view.paused) {
      if (view.labels[LABEL_EGRESS] !== 'allowlist') return;
      // Its proxy is part of a running allowlist sandbox: without it every request fails.
      const egress = await this.deps.engine.inspectContainer(namesFor(name).egress);
      if (egress?.running === true && !egress.paused) return;
      this.deps.logger.warn({ sandbox: name }, 'egress proxy not running, recovering it');
    } else {
      this.deps.logger.warn({ sandbox: name, status: view.status }, 'sandbox not running, starting it');
    }
    await this.recover(name, view);
  }

  private recover(name: string, view: ContainerView): Promise<void> {
    const inFlight = this.recovering.get(name);
    if (inFlight !== undefined) return inFlight;
    const run = this.doRecover(name, view).finally(() => this.recovering.delete(name));
    this.recovering.set(name, run);
    return run;
  }

  private async doRecover(name: string, view: ContainerView): Promise<void> {
    const { engine } = this.deps;
    const names = namesFor(name);
    const tier = view.labels[LABEL_EGRESS];
    let networkRebuilt = false;
    if (tier === 'allowlist' || tier === 'internal') {
      if (!(await engine.networkExists(names.network))) {
        this.deps.logger.warn({ sandbox: name }, 'internal network missing, recreating it');
        await engine.createNetwork(internalNetworkBody(names.network, this.resourceLabels(name, view))).catch(ignoreConflict);
        networkRebuilt = true;
      }
    }
    if (tier === 'allowlist') await this.recoverEgress(name, view, networkRebuilt);
    if (networkRebuilt) {
      await this.rebuildContainer(name, view);
    } else {
      if (view.paused) {
        await engine.unpauseContainer(name);
        const after = await engine.inspectContainer(name);
        if (after?.running === true && !after.paused) return;
      }
      try {
        await engine.startContainer(name);
      } catch (err) {
        // The network it was created on is gone (it is bound by id, not by name).
        if (engineStatus(err) !== 404) throw err;
        await this.rebuildContainer(name, view);
      }
    }
    if (tier === 'allowlist') await this.waitForEgress(names);
  }

  /** Recreates the container from its own inspect data; files live on the volumes. */
  private async rebuildContainer(name: string, view: ContainerView): Promise<void> {
    this.deps.logger.warn({ sandbox: name }, 'recreating the sandbox container on its rebuilt network');
    await this.deps.engine.removeContainer(name);
    await this.deps.engine.createContainer(name, sandboxBodyFromInspect(view));
    await this.deps.engine.startContainer(name);
  }

  private resourceLabels(name: string, view: ContainerView): Record<string, string> {
    const labels = { ...view.labels };
    delete labels[LABEL_EGRESS];
    delete labels[LABEL_ALLOW_HOSTS];
    labels[LABEL_NAME] = name;
    return labels;
  }

  private async recoverEgress(name: string, view: ContainerView, networkRebuilt: boolean): Promise<void> {
    const { engine } = this.deps;
    const names = namesFor(name);
    // On a rebuilt network the old proxy's endpoint points at a network id that no longer exists.
    if (networkRebuilt) await engine.removeContainer(names.egress);
    const egress = networkRebuilt ? undefined : await engine.inspectContainer(names.egress);
    if (egress === undefined) {
      this.deps.logger.warn({ sandbox: name }, 'egress proxy missing, rebuilding it from the recorded allowlist');
      await this.ensureSharedNetwork();
      const plan: EgressPlan = {
        names,
        allowHosts: allowHostsFromLabel(view.labels[LABEL_ALLOW_HOSTS]),
        labels: this.resourceLabels(name, view),
        egressProxyImage: this.deps.config.egressProxyImage,
        sharedNetwork: this.deps.config.network,
      };
      try {
        await this.createEgress(plan);
      } catch (err) {
        // A concurrent recovery created it first.
        ignoreConflict(err);
      }
      return;
    }
    if (egress.paused) await engine.unpauseContainer(names.egress);
    else if (!egress.running) await engine.startContainer(names.egress);
  }

  async destroy(name: string): Promise<void> {
    const { engine } = this.deps;
    const names = namesFor(name);
    await Promise.all([engine.removeContainer(names.container), engine.removeContainer(names.egress)]);
    await engine.removeNetwork(names.network);
    // Ephemeral volumes only; a persistent workspace is named cap-ws.<key> and stays.
    await Promise.all([engine.removeVolume(names.workspaceVolume), engine.removeVolume(names.skillsVolume)]);
  }

  async destroyWorkspace(volume: string): Promise<void> {
    try {
      await this.deps.engine.removeVolume(volume);
    } catch (err) {
      if (engineStatus(err) === 409) {
        throw new SandboxError('workspace_in_use', `Workspace volume ${volume} is still used by a sandbox; destroy that sandbox first.`, { cause: err });
      }
      throw err;
    }
  }

  private async ensureSharedNetwork(): Promise<void> {
    const { engine, config } = this.deps;
    if (await engine.networkExists(config.network)) return;
    await engine.createNetwork(sharedNetworkBody(config.network, this.deps.extraLabels)).catch(ignoreConflict);
  }

  private async createVolumes(plan: SandboxPlan): Promise<void> {
    const { engine } = this.deps;
    const creates: Promise<void>[] = [engine.createVolume(volumeBody(plan.names.skillsVolume, plan.labels, undefined, undefined))];
    if (plan.persistentWorkspace === undefined) {
      creates.push(engine.createVolume(volumeBody(plan.workspaceVolume, plan.labels, plan.volumeDriver, plan.limits.volumeSize)));
    } else if (!(await engine.volumeExists(plan.workspaceVolume))) {
      creates.push(engine.createVolume(volumeBody(plan.workspaceVolume, plan.persistentWorkspace.labels, plan.volumeDriver, plan.limits.volumeSize)));
    }
    await Promise.all(creates);
  }

  private async createInternalNetwork(names: SandboxNames, labels: Readonly<Record<string, string>>): Promise<void> {
    await this.deps.engine.createNetwork(internalNetworkBody(names.network, labels));
  }

  private async createEgress(plan: EgressPlan): Promise<void> {
    const { engine } = this.deps;
    const body = egressContainerBody(plan, this.deps.egressTestHosts);
    await this.createContainerPullingOnce(plan.names.egress, plan.egressProxyImage, body);
    await engine.connectNetwork(plan.sharedNetwork, plan.names.egress);
    await engine.startContainer(plan.names.egress);
  }

  private async createContainerPullingOnce(name: string, image: string, body: unknown): Promise<void> {
    const { engine } = this.deps;
    try {
      await engine.createContainer(name, body);
    } catch (err) {
      // 404 also means a missing network; only a missing image is worth a pull.
      if (engineStatus(err) !== 404 || !/no such image/i.test((err as Error).message)) throw err;
      this.deps.logger.info({ image }, 'image not on the engine, pulling it once');
      try {
        await engine.pullImage(image);
      } catch (pullErr) {
        throw new SandboxError('image_unavailable', `Image ${image} is not on the engine and could not be pulled; build or pre-pull it on every Docker node.`, { cause: pullErr });
      }
      await engine.createContainer(name, body);
    }
  }

  /** The proxy listens within a second of start; wait so the first command can use it. */
  private async waitForEgress(names: SandboxNames): Promise<void> {
    const seconds = Math.ceil(EGRESS_READY_TIMEOUT_MS / 1000);
    // One attempt can block on a name lookup (a proxy that exited leaves its name unresolvable),
    // so `timeout` holds the whole loop to the deadline, not just the attempt count.
    const probe = `while ! (exec 3<>/dev/tcp/${names.egress}/${EGRESS_PROXY_PORT}) 2>/dev/null; do sleep 0.05; done`;
    const run = await this.deps.engine.startExec(names.container, {
      cmd: ['timeout', '-s', 'KILL', String(seconds), 'bash', '-c', probe],
      user: SANDBOX_USER,
      onOutput: () => undefined,
    });
    const code = await run.finished;
    if (code !== 0) {
      throw new SandboxError('egress_unavailable', `The egress proxy ${names.egress} did not accept connections within ${seconds} s; check the image ${this.deps.config.egressProxyImage} and its logs.`);
    }
  }
}
