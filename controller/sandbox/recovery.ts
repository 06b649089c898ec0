/**
 * Bringing a sandbox back to running: `resume`, and the auto-start before exec and file
 * operations. Recreates a missing internal network, rebuilds a missing egress proxy from the
 * allowlist recorded in the container's labels, unpauses or starts what is stopped. Never execs
 * into a paused container: on Docker 20.10 with cgroup v1 such an exec can hang holding the
 * container lock (which then blocks inspect, unpause and remove too).
 */
import { decodeAllowHosts } from '../../common/index.js';
import { type ContainerView, engineStatus, sandboxBodyFromInspect, type EgressPlan, internalNetworkBody } from '../docker/index.js';
import { SandboxError, LABEL_ALLOW_HOSTS, LABEL_EGRESS, LABEL_NAME, meaningOfLabel, namesFor } from '../spec/index.js';
import { createEgress, ensureSharedNetwork, ignoreConflict, waitForEgress, type BuildDeps } from './build-steps.js';
import type { SandboxLanes } from './sandbox-lanes.js';

export class SandboxRecovery {
  constructor(
    private readonly deps: BuildDeps,
    private readonly lanes: SandboxLanes,
  ) {}

  /** Brings a sandbox back to running; `gone` when its container does not exist. */
  resume(name: string): Promise<'running' | 'gone'> {
    return this.lanes.run(name, async () => {
      const view = await this.deps.engine.inspectContainer(name);
      if (view === undefined) return 'gone';
      await this.doRecover(name, view);
      return 'running';
    });
  }

  /** Auto-start before a command or file operation: cheap when already running. */
  async ensureRunning(name: string): Promise<void> {
    const first = await this.deps.engine.inspectContainer(name);
    if (first !== undefined && (await this.isReady(name, first))) return;
    await this.lanes.run(name, async () => {
      // A change queued ahead of this one may have settled it either way: a resume that was
      // recreating the container (gone for a moment) or a destroy.
      const view = existing(name, await this.deps.engine.inspectContainer(name));
      if (await this.isReady(name, view)) return;
      this.deps.logger.warn({ sandbox: name, status: view.status }, view.running && !view.paused ? 'egress proxy not running, recovering it' : 'sandbox not running, starting it');
      await this.doRecover(name, view);
    });
  }

  /** Running and unpaused, with a running proxy when its tier has one. */
  private async isReady(name: string, view: ContainerView): Promise<boolean> {
    if (!view.running || view.paused) return false;
    if (!meaningOfLabel(view.labels[LABEL_EGRESS]).egressProxy) return true;
    // Its proxy is part of a running sandbox: without it every request fails.
    const egress = await this.deps.engine.inspectContainer(namesFor(name).egress);
    return egress?.running === true && !egress.paused;
  }

  private async doRecover(name: string, view: ContainerView): Promise<void> {
    const { engine } = this.deps;
    const names = namesFor(name);
    const tier = meaningOfLabel(view.labels[LABEL_EGRESS]);
    let networkRebuilt = false;
    if (tier.sandboxNetwork === 'internal') {
      if (!(await engine.networkExists(names.network))) {
        this.deps.logger.warn({ sandbox: name }, 'internal network missing, recreating it');
        await engine.createNetwork(internalNetworkBody(names.network, this.resourceLabels(name, view))).catch(ignoreConflict);
        networkRebuilt = true;
      }
    }
    if (tier.egressProxy) await this.recoverEgress(name, view, networkRebuilt);
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
    if (tier.egressProxy) await waitForEgress(this.deps, names);
  }

  /** Recreates the container from its own inspect data; files live on the volumes. */
  private async rebuildContainer(name: string, view: ContainerView): Promise<void> {
    this.deps.logger.warn({ sandbox: name }, 'recreating the sandbox container on its rebuilt network');
    await this.deps.engine.removeContainer(name);
    await this.deps.engine.createContainer(name, sandboxBodyFromInspect(view, this.deps.config));
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
      await ensureSharedNetwork(this.deps);
      const plan: EgressPlan = {
        names,
        allowHosts: decodeAllowHosts(view.labels[LABEL_ALLOW_HOSTS] ?? ''),
        labels: this.resourceLabels(name, view),
        egressProxyImage: this.deps.config.egressProxyImage,
        sharedNetwork: this.deps.config.network,
        logCaps: this.deps.config,
      };
      try {
        await createEgress(this.deps, plan);
      } catch (err) {
        // A concurrent recovery created it first.
        ignoreConflict(err);
      }
      return;
    }
    if (egress.paused) await engine.unpauseContainer(names.egress);
    else if (!egress.running) await engine.startContainer(names.egress);
  }
}

function existing(name: string, view: ContainerView | undefined): ContainerView {
  if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist (its container is gone); create it again.`);
  return view;
}
