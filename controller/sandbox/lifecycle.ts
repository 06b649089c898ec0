/**
 * Creating, suspending and removing the Docker objects of one sandbox. Bringing a stopped,
 * paused or partly removed sandbox back is recovery.ts; the steps both share are build-steps.ts.
 */
import { engineStatus, sandboxContainerBody, internalNetworkBody, volumeBody } from '../docker/index.js';
import { SandboxError, TIERS, namesFor, usesSharedNetwork, type SandboxNames, type SandboxPlan } from '../spec/index.js';
import { createContainerPullingOnce, createEgress, ensureSharedNetwork, waitForEgress, type BuildDeps } from './build-steps.js';
import { StepGroup } from './step-group.js';

const STOP_GRACE_SECONDS = 2;

export class SandboxLifecycle {
  constructor(private readonly deps: BuildDeps) {}

  async create(plan: SandboxPlan): Promise<void> {
    const { engine } = this.deps;
    const { names, tier } = plan;
    const meaning = TIERS[tier];
    // A stale instance (the host may have died before recording the handle) is replaced.
    await this.destroy(names.name);
    const steps = new StepGroup();
    try {
      // Create-to-ready is what a conversation waits for: every step starts as soon as what it
      // needs exists (step-group.ts keeps a failure from leaving anything behind).
      const shared = usesSharedNetwork(meaning) ? steps.run(() => ensureSharedNetwork(this.deps)) : undefined;
      const internal = meaning.sandboxNetwork === 'internal' ? steps.run(() => this.createInternalNetwork(names, plan.labels)) : undefined;
      const volumes = steps.run(() => this.createVolumes(plan));
      if (meaning.egressProxy) {
        steps.run(async () => {
          await shared;
          steps.proceed();
          await createEgress(this.deps, plan, internal ?? Promise.resolve(), steps.proceed);
        });
      }
      steps.run(async () => {
        // The sandbox's own network must exist before its create names it, and its volumes
        // too: a create would otherwise make them, unlabelled.
        await Promise.all([meaning.sandboxNetwork === 'shared' ? shared : internal, volumes]);
        steps.proceed();
        await createContainerPullingOnce(this.deps, names.container, plan.image, sandboxContainerBody(plan));
        steps.proceed();
        await engine.startContainer(names.container);
      });
      await steps.settled();
      // Both containers are up and the proxy holds its leg on the internal network.
      if (meaning.egressProxy) await waitForEgress(this.deps, names);
    } catch (err) {
      // Every step has finished (settled), so the cleanup finds all they made.
      await this.destroy(names.name).catch((cleanupErr: unknown) => {
        this.deps.logger.warn({ sandbox: names.name, err: cleanupErr }, 'cleanup after failed create did not finish');
      });
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
    // Networks and volumes can only go once no container uses them.
    await Promise.all([engine.removeContainer(names.container), engine.removeContainer(names.egress)]);
    // Ephemeral volumes only; a persistent workspace is named cap-ws.<key> and stays.
    await Promise.all([engine.removeNetwork(names.network), engine.removeVolume(names.workspaceVolume), engine.removeVolume(names.skillsVolume)]);
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
