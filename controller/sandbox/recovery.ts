/**
 * Bringing a sandbox back to running: `resume`, and the auto-start before exec and file
 * operations. Recreates a missing internal network, rebuilds a missing egress proxy from the
 * allowlist recorded in the container's labels, unpauses or starts what is stopped, and puts back
 * an egress proxy (or a sandbox) that runs but is off the sandbox's network: a controller killed
 * between the proxy's start and its connect, or `docker network disconnect`, leaves a sandbox
 * that looks healthy with no way out. Never execs into a paused container: on Docker 20.10 with
 * cgroup v1 such an exec can hang holding the container lock (which then blocks inspect, unpause
 * and remove too).
 */
import { decodeAllowHosts } from '../../common/index.js';
import { type ContainerView, carriesCa, engineStatus, sandboxBodyFromInspect, type EgressPlan } from '../docker/index.js';
import {
  SandboxError, isSandboxError, egressHostOfLabels, startRefusal, egressNanoCpus, LABEL_ALLOW_HOSTS, LABEL_EGRESS, LABEL_EGRESS_ISOLATION, LABEL_NAME, LABEL_WARM_NETWORK, LABEL_WORKSPACE_KEY, isWarmNetworkName,
  meaningOfLabel, namesFor, persistentWorkspaceVolume, sandboxNetworkName, withEgressProxyEnv, type TierMeaning,
} from '../spec/index.js';
import { connectEgress, createEgress, keepRegistration, waitForKept, type KeptRegistration } from './build-steps.js';
import { ownSeat, readsRegistrations, registrable } from './egress-policy.js';
import { RegistrationChecks } from './registration-check.js';
import { connectShard, ensureShard, shardOfLabels, subnetSlot } from './shards.js';
import type { BuildDeps } from './build-deps.js';
import { asConflict, CHANGE_SHOWS_MS, dockerSays, replacedMeanwhile } from './concurrent-change.js';
import { ensureSharedNetwork, findOrRecreateSandboxNetwork, type SandboxNetwork } from './sandbox-network.js';
import { workspaceLane, type SandboxLanes } from './sandbox-lanes.js';
import { requireOwnLabels } from './own-labels.js';
import { requireWorkspaceFree } from './workspace-holder.js';
import { handOverWorkspace, workspaceVolumeOf } from './workspace-handover.js';

export class SandboxRecovery {
  private readonly registrations: RegistrationChecks;

  constructor(
    private readonly deps: BuildDeps,
    private readonly lanes: SandboxLanes,
  ) {
    this.registrations = new RegistrationChecks((sandbox, proxy, err) => deps.logger.warn({ sandbox, egress: proxy.name, err }, 'egress registration could not be read before a command'));
  }

  /** Brings a sandbox back to running; `gone` when its container does not exist. */
  resume(name: string): Promise<'running' | 'gone'> {
    return this.lanes.run(name, async () => {
      const view = await this.deps.engine.inspectContainer(name);
      if (view === undefined) return 'gone';
      await this.recover(name, view);
      return 'running';
    });
  }

  /**
   * Auto-start before a command or file operation: cheap when already running (two inspects, and
   * a read of the registration when the last one is older than REGISTRATION_CHECKED_MS).
   */
  async ensureRunning(name: string): Promise<void> {
    const first = await this.deps.engine.inspectContainer(name);
    if (first !== undefined && (await this.unready(name, first)) === undefined) return;
    await this.lanes.run(name, async () => {
      // A change queued ahead of this one may have settled it either way: a resume that was
      // recreating the container (gone for a moment) or a destroy.
      const view = existing(name, await this.deps.engine.inspectContainer(name));
      const problem = await this.unready(name, view);
      if (problem === undefined) return;
      this.deps.logger.warn({ sandbox: name, status: view.status }, problem);
      await this.recover(name, view);
    });
  }

  /**
   * What keeps the sandbox from serving a command, or undefined: it must run unpaused, on its
   * network, and so must its proxy when its tier has one; without the proxy's leg on the
   * sandbox's network every request from the sandbox times out. A proxy that reads registrations
   * (every shard, and a sandbox's own without secrets) must also hold the sandbox's (read at most
   * once per period, registration-check.ts), without which it refuses the sandbox everything.
   */
  private async unready(name: string, view: ContainerView): Promise<string | undefined> {
    if (!view.running || view.paused) return 'sandbox not running, starting it';
    const meaning = meaningOfLabel(view.labels[LABEL_EGRESS]);
    if (meaning.sandboxNetwork !== 'internal') return undefined;
    const own = sandboxNetworkName(name, view.labels);
    // A leg on any other network (docker network connect) is a way around the proxy, or out of
    // the internal tier: the command must not run until it is gone.
    if (view.networks.some((n) => n.name !== own)) return 'sandbox on a network other than its own, recovering it';
    const network = view.networks.find((n) => n.id !== '');
    if (network === undefined) return 'sandbox not on its network, recovering it';
    const host = egressHostOfLabels(view.labels[LABEL_EGRESS], view.labels[LABEL_EGRESS_ISOLATION]);
    if (host === 'none') return undefined;
    const proxy = host === 'own' ? namesFor(name).egress : shardOfLabels(view.labels, this.deps.config.network)?.name;
    if (proxy === undefined) return 'egress shard not recorded, recovering it';
    const egress = await this.deps.engine.inspectContainer(proxy);
    if (egress?.running !== true || egress.paused) return 'egress proxy not running, recovering it';
    if (!egress.networks.some((n) => n.id === network.id)) return 'egress proxy not on the sandbox network, recovering it';
    const reads = host === 'shard' || readsRegistrations(egress);
    if (reads && !(await this.registrations.held(this.deps.engine, name, { name: proxy, id: egress.id, host }, network.id))) return 'egress registration missing, recovering it';
    return undefined;
  }

  private async recover(name: string, view: ContainerView): Promise<void> {
    try {
      await this.doRecover(name, view);
    } catch (err) {
      throw asConflict(err, name, 'recovery');
    }
  }

  private async doRecover(name: string, view: ContainerView): Promise<void> {
    const names = namesFor(name);
    const tier = meaningOfLabel(view.labels[LABEL_EGRESS]);
    // A sandbox that runs is repaired whatever the config says now; one this would start again
    // meets the deployment's rules first (and a rebuild, below, too).
    if (!view.running || view.paused) this.requireStartAllowed(name, view);
    let network: SandboxNetwork | undefined;
    let networkRebuilt = false;
    if (tier.sandboxNetwork === 'internal') {
      const found = await findOrRecreateSandboxNetwork(this.deps, names, view, this.resourceLabels(name, view), this.sameContainer(name, view));
      network = found.network;
      networkRebuilt = found.rebuilt;
    }
    // Off every network but its own before anything else is brought up: a sandbox of an internal
    // tier has that one network alone (a rebuilt container is made on it alone).
    if (network !== undefined && !networkRebuilt) await this.leaveOtherNetworks(name, view);
    const host = egressHostOfLabels(view.labels[LABEL_EGRESS], view.labels[LABEL_EGRESS_ISOLATION]);
    // The registration the sandbox is served under, whose lifecycle id the probe waits for: on a
    // shard, or a proxy of its own whose registration recovery kept or wrote again.
    let registered: KeptRegistration | undefined;
    if (host === 'own' && network !== undefined) registered = await this.recoverEgress(name, view, network, networkRebuilt);
    if (host === 'shard' && network !== undefined) registered = await this.recoverShardLeg(name, view, network);
    if (networkRebuilt) {
      await this.rebuildContainer(name, view, tier, network);
    } else {
      await this.startContainer(name, view, tier, network);
    }
    if (tier.egressProxy) await this.probed(name, () => waitForKept(this.deps, names, registered, proxyHost(name, view, network)));
  }

  /**
   * The proxy probe, whose failure another call explains when it destroyed or made the sandbox
   * again meanwhile (a destroy takes the registration away before the container): `conflict`,
   * as for a create, not `egress_unavailable`. Found by racing controller processes, an exec
   * beside a destroy (docker-scale.test.ts).
   */
  private async probed(name: string, probe: () => Promise<void>): Promise<void> {
    const id = (await this.deps.engine.inspectContainer(name))?.id;
    try {
      await probe();
    } catch (err) {
      if (id === undefined || !isSandboxError(err, 'egress_unavailable')) throw err;
      const replaced = await replacedMeanwhile(this.deps.engine, new Map([[name, id]]), CHANGE_SHOWS_MS);
      if (replaced === undefined) throw err;
      throw new SandboxError('conflict', `${name} was changed by another call while this recovery ran (${replaced}); retry.`, { cause: err });
    }
  }

  /**
   * Disconnects the sandbox's container from every network that is not its own (someone ran
   * `docker network connect`): with such a leg its commands reached past the egress proxy (the
   * shared network's gateway and everything routed from it), and the check before a command did
   * not look (review finding). A network the socket proxy will not let it leave fails the
   * recovery, so no command runs.
   */
  private async leaveOtherNetworks(name: string, view: ContainerView): Promise<void> {
    const own = sandboxNetworkName(name, view.labels);
    for (const other of view.networks.filter((n) => n.name !== own)) {
      this.deps.logger.warn({ sandbox: name, network: other.name }, 'sandbox on a network other than its own, disconnecting it');
      await this.deps.engine.disconnectNetwork(other.id !== '' ? other.id : other.name, name);
    }
  }

  private async startContainer(name: string, view: ContainerView, tier: TierMeaning, network: SandboxNetwork | undefined): Promise<void> {
    const { engine } = this.deps;
    let current: ContainerView | undefined = view;
    if (view.paused) {
      await engine.unpauseContainer(name);
      // A `docker stop` may land between the unpause and now.
      current = await engine.inspectContainer(name);
    }
    if (current === undefined || !current.running) {
      const started = await this.inWorkspaceLane(view, async () => {
        await requireWorkspaceFree(this.deps, name, view.labels[LABEL_WORKSPACE_KEY]);
        try {
          await engine.startContainer(name);
          return true;
        } catch (err) {
          // The network it was created on is gone (it is bound by id, not by name); or the
          // container itself, destroyed by another process, which a rebuild must not undo.
          if (engineStatus(err) !== 404) throw err;
          await this.requireSame(name, view);
          return false;
        }
      });
      if (!started) {
        await this.rebuildContainer(name, view, tier, network);
        return;
      }
      current = network === undefined ? undefined : await engine.inspectContainer(name);
    }
    // Running: on its network again if someone took it off (docker network disconnect).
    if (network !== undefined && current !== undefined && !current.networks.some((n) => n.id === network.id)) {
      this.deps.logger.warn({ sandbox: name }, 'sandbox not on its network, connecting it again');
      await engine.connectNetwork(network.id, name);
    }
  }

  /** Recreates the container from its own inspect data; files live on the volumes. */
  private async rebuildContainer(name: string, view: ContainerView, tier: TierMeaning, network: SandboxNetwork | undefined): Promise<void> {
    this.deps.logger.warn({ sandbox: name }, 'recreating the sandbox container on its rebuilt network');
    const target = tier.sandboxNetwork === 'internal' ? network?.id : tier.sandboxNetwork === 'shared' ? await ensureSharedNetwork(this.deps) : 'none';
    if (target === undefined) throw new SandboxError('engine_error', `No network to rebuild ${name} on.`);
    this.requireStartAllowed(name, view);
    // Still the container read: one destroyed (or made again) by another process since is not
    // brought back from this inspect data.
    await this.requireSame(name, view);
    await this.deps.engine.removeContainer(name);
    const dns = tier.egressProxy ? network?.egressAddress : undefined;
    // On a warm network made again, the proxy's address moved with the subnet.
    const host = proxyHost(name, view, network);
    const made = host === namesFor(name).egress ? view : { ...view, env: withEgressProxyEnv(view.env, host) };
    await this.inWorkspaceLane(view, async () => {
      const body = sandboxBodyFromInspect(made, this.deps.config, target, dns);
      const id = await this.deps.engine.createContainer(name, body);
      // The tag may name another image now, one that carries the controller's labels: that
      // container is not started, and not left for a command to believe its labels.
      await requireOwnLabels(this.deps, name, view.image, body.Labels).catch(async (err: unknown) => {
        await this.deps.engine.removeContainer(name);
        throw err;
      });
      try {
        await requireWorkspaceFree(this.deps, name, view.labels[LABEL_WORKSPACE_KEY]);
        await handOverWorkspace(this.deps, { name, volume: workspaceVolumeOf(view, name), image: view.image, labels: this.resourceLabels(name, view) });
        await this.deps.engine.startContainer(name);
      } catch (err) {
        if (network !== undefined) await this.removeIfDestroyed(name, id, network.id);
        throw err;
      }
    });
  }

  /**
   * After a rebuilt container (`id`) failed to start: when its network is gone, a destroy in
   * another process ran between its create and its start (a container not started holds no
   * endpoint, so the destroy removed the network under it) and said done. The container goes:
   * else it outlived that destroy, a sandbox to `ls`, kept by gc, which the next resume would
   * bring back. The volumes its create made again go with the next create of the name (its
   * destroy of a stale instance): which of them that destroy removed, and which hold a
   * workspace, the engine's answers here cannot tell.
   */
  private async removeIfDestroyed(name: string, id: string, networkId: string): Promise<void> {
    if ((await this.deps.engine.inspectNetwork(networkId)) !== undefined) return;
    if ((await this.deps.engine.inspectContainer(name))?.id === id) await this.deps.engine.removeContainer(name);
    throw new SandboxError('conflict', `${name} was destroyed by another call while this recovery ran; retry.`);
  }

  /** The deployment's rules hold at every start, not only at create (start-rules.ts). */
  private requireStartAllowed(name: string, view: ContainerView): void {
    const refused = startRefusal(name, { image: view.image, tier: view.labels[LABEL_EGRESS], hostConfig: view.hostConfig }, this.deps.config);
    if (refused !== undefined) throw refused;
  }

  /** Runs `step` in the lane of the sandbox's persistent workspace, if it has one (sandbox-lanes.ts). */
  private inWorkspaceLane<T>(view: ContainerView, step: () => Promise<T>): Promise<T> {
    const key = view.labels[LABEL_WORKSPACE_KEY];
    return key === undefined ? step() : this.lanes.run(workspaceLane(persistentWorkspaceVolume(key)), step);
  }

  private resourceLabels(name: string, view: ContainerView): Record<string, string> {
    const labels = { ...view.labels };
    delete labels[LABEL_EGRESS];
    delete labels[LABEL_ALLOW_HOSTS];
    labels[LABEL_NAME] = name;
    return labels;
  }

  /**
   * The sandbox's own proxy running on its network, its registration (when it reads one) kept or
   * written again; that registration, undefined for a proxy whose policy is its environment or one
   * a concurrent recovery rebuilt.
   */
  private async recoverEgress(name: string, view: ContainerView, network: SandboxNetwork, networkRebuilt: boolean): Promise<KeptRegistration | undefined> {
    const { engine } = this.deps;
    const names = namesFor(name);
    // On a rebuilt network the old proxy's endpoint points at a network id that no longer exists.
    if (networkRebuilt) await engine.removeContainer(names.egress);
    const egress = networkRebuilt ? undefined : await engine.inspectContainer(names.egress);
    if (egress === undefined) return this.rebuildEgress(name, view, network);
    if (egress.paused) {
      await engine.unpauseContainer(names.egress);
    } else if (!egress.running) {
      try {
        await engine.startContainer(names.egress);
      } catch (err) {
        // Its shared network is gone: a proxy of the current config replaces it.
        if (!dockerSays(err, 404, /network/)) throw err;
        await engine.removeContainer(names.egress);
        return this.rebuildEgress(name, view, network);
      }
    }
    const running = await engine.inspectContainer(names.egress);
    if (running !== undefined && !running.networks.some((n) => n.id === network.id)) {
      this.deps.logger.warn({ sandbox: name, egress: names.egress }, 'egress proxy not on the sandbox network, connecting it again');
      await connectEgress(this.deps, names.egress, network);
    }
    const target = registrable(network);
    if (running === undefined || target === undefined || !readsRegistrations(running)) return undefined;
    const allowHosts = decodeAllowHosts(view.labels[LABEL_ALLOW_HOSTS] ?? '');
    const seat = ownSeat(names);
    return { lifecycle: await keepRegistration(this.deps, { names, allowHosts }, seat, target, this.sameContainer(name, view)), seat, target };
  }

  /** Throws `conflict` unless sandbox `name` is still the container `view`. */
  private async requireSame(name: string, view: ContainerView): Promise<void> {
    if (await this.sameContainer(name, view)()) return;
    throw new SandboxError('conflict', `${name} was destroyed or made again by another call while this recovery ran; retry.`);
  }

  /** Whether sandbox `name` is still the container `view` (not destroyed, nor made again). */
  private sameContainer(name: string, view: ContainerView): () => Promise<boolean> {
    return async () => (await this.deps.engine.inspectContainer(name))?.id === view.id;
  }

  /**
   * A shard sandbox's way out: its shard (the label's) made again when missing, from its volume,
   * which keeps every registration, and started; the sandbox's registration kept or written again
   * (a live change survives; a missing one gets the label's list); the shard's leg connected again.
   */
  private async recoverShardLeg(name: string, view: ContainerView, network: SandboxNetwork): Promise<KeptRegistration> {
    const shard = shardOfLabels(view.labels, this.deps.config.network);
    const target = registrable(network);
    if (shard === undefined || target === undefined) {
      throw new SandboxError('egress_unavailable', `Sandbox ${name} records no shard of the shared egress, or its network no subnet of its own; destroy it and create it again.`);
    }
    await ensureShard(this.deps, shard.index, await ensureSharedNetwork(this.deps));
    const names = namesFor(name);
    const allowHosts = decodeAllowHosts(view.labels[LABEL_ALLOW_HOSTS] ?? '');
    const seat = { container: shard.name, slot: subnetSlot(target.subnet) };
    const lifecycle = await keepRegistration(this.deps, { names, allowHosts }, seat, target, this.sameContainer(name, view));
    // A warm network's leg has no alias: its sandbox names the proxy by address.
    await connectShard(this.deps, shard.name, network, isWarmNetworkName(view.labels[LABEL_WARM_NETWORK]) ? undefined : names.egress);
    return { lifecycle, seat, target };
  }

  /**
   * A missing proxy, rebuilt: its allowlist and labels from the container's labels, its image and
   * shared network from the current deployment config. The registration it kept, when it reads
   * one and this call made it (not a concurrent recovery).
   */
  private async rebuildEgress(name: string, view: ContainerView, network: SandboxNetwork): Promise<KeptRegistration | undefined> {
    const names = namesFor(name);
    this.deps.logger.warn({ sandbox: name }, 'egress proxy missing, rebuilding it from the recorded allowlist');
    const shared = await ensureSharedNetwork(this.deps);
    const allowHosts = decodeAllowHosts(view.labels[LABEL_ALLOW_HOSTS] ?? '');
    const plan: EgressPlan = {
      names,
      allowHosts,
      // The placeholders the sandbox holds stay valid: the rebuilt proxy gets them (and the values
      // read now). A sandbox made without the CA keeps a proxy that does not inspect: one that
      // did would fail every TLS connection the sandbox cannot verify.
      credentials: carriesCa(view.env) ? await this.deps.credentials.forSandbox(allowHosts, placeholdersOf(view.env)) : undefined,
      labels: this.resourceLabels(name, view),
      egressProxyImage: this.deps.config.egressProxyImage,
      logCaps: this.deps.config,
      egressNanoCpus: egressNanoCpus(this.deps.config),
    };
    try {
      return await createEgress(this.deps, plan, shared, Promise.resolve(network), undefined, undefined, { same: this.sameContainer(name, view) });
    } catch (err) {
      // The name in use: a concurrent recovery created it first, and writes its registration
      // (waitForKept waits for the one at the seat). Any other error, a 409 of the registration's
      // read included (a proxy restarting), is this rebuild's.
      if (!dockerSays(err, 409, /already in use/)) throw err;
      const target = registrable(network);
      return plan.credentials !== undefined || target === undefined ? undefined : { lifecycle: undefined, seat: ownSeat(names), target };
    }
  }
}

/**
 * What the sandbox's proxy variables name: its proxy's name, or on a warm network (which a shard
 * joined under no alias) the proxy's address there.
 */
function proxyHost(name: string, view: ContainerView, network: SandboxNetwork | undefined): string {
  const address = network?.egressAddress;
  return isWarmNetworkName(view.labels[LABEL_WARM_NETWORK]) && address !== undefined ? address : namesFor(name).egress;
}

/** NAME=value pairs of a container's environment, for the secrets' placeholders it holds. */
function placeholdersOf(env: readonly string[]): Record<string, string> {
  return Object.fromEntries(env.map((e) => [e.slice(0, Math.max(0, e.indexOf('='))), e.slice(e.indexOf('=') + 1)]).filter(([k]) => k !== ''));
}

function existing(name: string, view: ContainerView | undefined): ContainerView {
  if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist (its container is gone); create it again.`);
  return view;
}
