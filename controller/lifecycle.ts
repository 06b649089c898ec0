/**
 * Creating, suspending and removing the Docker objects of one sandbox. Bringing a stopped,
 * paused or partly removed sandbox back is recovery.ts; the steps both share are build-steps.ts.
 */
import { engineStatus } from './engine.js';
import { SandboxError } from './errors.js';
import { namesFor, type SandboxNames } from './names.js';
import type { SandboxPlan } from './sandbox-plan.js';
import { sandboxContainerBody } from './container-spec.js';
import { internalNetworkBody } from './network-spec.js';
import { volumeBody } from './volume-spec.js';
import { createContainerPullingOnce, createEgress, ensureSharedNetwork, waitForEgress, type BuildDeps } from './build-steps.js';

const STOP_GRACE_SECONDS = 2;

export class SandboxLifecycle {
  constructor(private readonly deps: BuildDeps) {}

  async create(plan: SandboxPlan): Promise<void> {
    const { engine } = this.deps;
    const { names } = plan;
    // A stale instance (the host may have died before recording the handle) is replaced.
    await this.destroy(names.name);
    const pending: Promise<unknown>[] = [];
    try {
      // Independent steps run side by side: create-to-ready is what a conversation waits for.
      await Promise.all([
        plan.tier === 'allowlist' || plan.tier === 'open' ? ensureSharedNetwork(this.deps) : undefined,
        plan.tier === 'allowlist' || plan.tier === 'internal' ? this.createInternalNetwork(names, plan.labels) : undefined,
        this.createVolumes(plan),
      ]);
      const sandbox = createContainerPullingOnce(this.deps, names.container, plan.image, sandboxContainerBody(plan))
        .then(() => engine.startContainer(names.container));
      // The readiness probe runs from inside the sandbox as soon as it is up, overlapping the
      // proxy's own start.
      pending.push(plan.tier === 'allowlist' ? createEgress(this.deps, plan) : Promise.resolve());
      pending.push(plan.tier === 'allowlist' ? sandbox.then(() => waitForEgress(this.deps, names)) : sandbox);
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
}
