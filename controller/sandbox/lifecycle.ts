/**
 * Creating, suspending and removing the Docker objects of one sandbox. Bringing a stopped,
 * paused or partly removed sandbox back is recovery.ts; the steps both share are build-steps.ts,
 * the networks sandbox-network.ts. Another controller process may create or destroy the same
 * sandbox at the same moment: what that explains ends as `conflict` (concurrent-change.ts), and
 * a destroy tries again until what it removes stays removed.
 */
import { engineStatus, sandboxContainerBody, volumeBody, type NetworkView } from '../docker/index.js';
import {
  LABEL_EGRESS_ISOLATION, LABEL_EGRESS_SHARD, SandboxError, egressHostOf, egressShardName, isSandboxError, TIERS, namesFor, onWarmNetwork, usesSharedNetwork, type SandboxPlan,
} from '../spec/index.js';
import { createContainerPullingOnce, createEgress, joinShard, registerOnShard, waitForEgress } from './build-steps.js';
import type { BuildDeps } from './build-deps.js';
import { asConflict, CHANGE_SHOWS_MS, concurrentChange, replacedMeanwhile } from './concurrent-change.js';
import { createSandboxNetwork, ensureSharedNetwork, ownWarmNetwork, removeSandboxNetworks } from './sandbox-network.js';
import { connectShard, ensureShard, ShardClaims } from './shards.js';
import { WarmNetworks } from './warm-networks.js';
import { StepGroup } from './step-group.js';
import { requireOwnLabels } from './own-labels.js';
import { requireWorkspaceFree } from './workspace-holder.js';
import { requireWorkspaceSize } from './workspace-size.js';
import { handOverWorkspace } from './workspace-handover.js';

const STOP_GRACE_SECONDS = 2;
/**
 * Rounds of a destroy: a container another process creates between this destroy's removal of
 * the containers and of the network keeps the network in use; the next round removes it again.
 */
const DESTROY_ROUNDS = 3;

export class SandboxLifecycle {
  /** This process's creates joining a shard now: counted in the shard's room. */
  private readonly shardClaims = new ShardClaims();
  /** The warm networks this process keeps ready for shard sandboxes (`warmSlots`). */
  readonly warm: WarmNetworks;
  /** This process's creates under way: the pool refills once none is. */
  private creating = 0;

  constructor(private readonly deps: BuildDeps) {
    this.warm = new WarmNetworks(deps, this.shardClaims);
  }

  async create(request: SandboxPlan): Promise<void> {
    const meaning = TIERS[request.tier];
    const host = egressHostOf(meaning, this.deps.config.egressIsolation, request.credentials !== undefined || this.deps.egressMode === 'report');
    // Recorded on the container: recovery, `allow` and the operator find its proxy by it.
    const shardPlan: SandboxPlan = host === 'shard' ? { ...request, containerLabels: { ...request.containerLabels, [LABEL_EGRESS_ISOLATION]: 'shared' } } : request;
    this.creating += 1;
    try {
      await this.build(request, shardPlan, host);
    } finally {
      // Once no create is under way, either way: a refill beside one competes with it for the
      // engine, on its critical path (measured: its container's start took longer, up to twice
      // as long among a thousand networks). Creates that never pause make their own networks
      // until the first pause, as without slots.
      this.creating -= 1;
      if (this.creating === 0) this.warm.refill();
    }
  }

  private async build(request: SandboxPlan, shardPlan: SandboxPlan, host: ReturnType<typeof egressHostOf>): Promise<void> {
    const { engine } = this.deps;
    const { names } = request;
    const meaning = TIERS[request.tier];
    // A stale instance (the host may have died before recording the handle) is replaced.
    await this.destroy(names.name);
    // A shard sandbox takes a warm network when one is ready: made, and joined by its shard.
    const warm = host === 'shard' && meaning.sandboxNetwork === 'internal' ? this.warm.take() : undefined;
    const plan = warm === undefined ? shardPlan : onWarmNetwork(shardPlan, warm.name, warm.network.egressAddress);
    const steps = new StepGroup();
    // The shard place this create holds until its leg is connected, given back however it ends.
    const giveBack: Array<() => void> = [];
    // The containers this create made, by id: another process may replace them meanwhile.
    const made = new Map<string, string>();
    const remember = (name: string, id: string): void => {
      made.set(name, id);
    };
    try {
      // Create-to-ready is what a conversation waits for: every step starts as soon as what it
      // needs exists (step-group.ts keeps a failure from leaving anything behind).
      const shared = usesSharedNetwork(meaning) ? steps.run(() => ensureSharedNetwork(this.deps)) : undefined;
      // A shard sandbox's shard, chosen (and started, when new) first: its number is a label of
      // the network and the container, so that a destroy and a recovery find it.
      const claim =
        host === 'shard' && shared !== undefined && warm === undefined
          ? steps.run(async () => {
              const claimed = await this.shardClaims.claim(this.deps, await shared);
              giveBack.push(claimed.release);
              return claimed;
            })
          : undefined;
      const shard = warm === undefined ? claim?.then((c) => c.index) : Promise.resolve(warm.shard);
      const shardLabels = async (labels: Readonly<Record<string, string>>): Promise<Record<string, string>> =>
        shard === undefined ? { ...labels } : { ...labels, [LABEL_EGRESS_SHARD]: String(await shard) };
      const internal =
        warm !== undefined ? Promise.resolve(warm.network)
        : meaning.sandboxNetwork === 'internal' ? steps.run(async () => createSandboxNetwork(this.deps, names, await shardLabels(plan.labels)))
        : undefined;
      const volumes = steps.run(() => this.createVolumes(plan));
      // Through a container of its own, with the workspace its one mount (workspace-handover.ts).
      const handOver = (): Promise<void> => handOverWorkspace(this.deps, { name: names.name, volume: plan.workspaceVolume, image: plan.image, labels: plan.labels });
      // The lifecycle id of the sandbox's registration (on a shard, or in a proxy of its own that
      // reads one), which the probe waits for.
      const registered =
        host !== 'none' && shared !== undefined && internal !== undefined
          ? steps.run(async (): Promise<string | undefined> => {
              const sharedId = await shared;
              steps.proceed();
              if (host === 'own') return (await createEgress(this.deps, plan, sharedId, internal, steps.proceed, remember))?.lifecycle;
              if (warm !== undefined) {
                // The shard may have stopped, or been removed (its leg with it), since the network
                // was made: running and on it again, the registration first, as a recovery does.
                // Else this create would fail egress_unavailable, as would each one on a warm
                // network made before, until the pool had turned over. Beside the container's
                // create, so off its critical path when nothing is missing (an inspect, a connect).
                const shardName = egressShardName(this.deps.config.network, warm.shard);
                await ensureShard(this.deps, warm.shard, sharedId);
                const lifecycle = await registerOnShard(this.deps, plan, shardName, warm.network);
                await connectShard(this.deps, shardName, warm.network, undefined);
                return lifecycle;
              }
              if (claim === undefined) return undefined;
              const { index, release } = await claim;
              // Counted by the shard's legs from now on.
              return joinShard(this.deps, plan, egressShardName(this.deps.config.network, index), await internal, steps.proceed).finally(release);
            })
          : undefined;
      steps.run(async () => {
        // The sandbox's own network must exist before its create names it (by id), and its
        // volumes too: a create would otherwise make them, unlabelled.
        const [network, own, onPlugin] = await Promise.all([meaning.sandboxNetwork === 'shared' ? shared : internal?.then((n) => n.id), internal, volumes]);
        steps.proceed();
        const body = sandboxContainerBody({ ...plan, containerLabels: await shardLabels(plan.containerLabels) }, network, own?.egressAddress);
        remember(names.container, await createContainerPullingOnce(this.deps, names.container, plan.image, body));
        steps.proceed();
        await requireOwnLabels(this.deps, names.container, plan.image, body.Labels);
        steps.proceed();
        await requireWorkspaceFree(this.deps, names.container, plan.persistentWorkspace?.key);
        steps.proceed();
        // The workspace goes to the sandbox user once this create holds the sandbox's name (a
        // create racing it on the same id stopped at the container's create) and found no other
        // sandbox using the workspace. A volume plugin is asked to mount and unmount again for an
        // archive put into a running container, and some unmount it under the container
        // (moby#34665): with one, before the start. Otherwise beside the start: the hand-over
        // container is of its own, and the archive holds no lock of the sandbox's container.
        if (onPlugin) {
          await handOver();
          steps.proceed();
        } else {
          steps.run(handOver);
        }
        await engine.startContainer(names.container);
      });
      await steps.settled();
      // Both containers are up and the proxy holds its leg on the internal network.
      if (meaning.egressProxy) await waitForEgress(this.deps, names, await registered, warm?.network.egressAddress);
      // Built: from now on gc keeps it (a failure here is the create's, and destroys it).
      await engine.removeVolume(names.buildingVolume);
    } catch (err) {
      for (const release of giveBack) release();
      // Asked before the cleanup removes them: a proxy that never answered, a start that failed,
      // are explained by another call that replaced or removed what this create made.
      const probeFailed = isSandboxError(err, 'egress_unavailable');
      const replaced = await replacedMeanwhile(this.deps.engine, made, probeFailed ? CHANGE_SHOWS_MS : 0);
      // Never handed out again: its registration ended and its leg taken away while the network is
      // still there (after its removal, another create could register the subnet), then removed
      // unless the sandbox runs on it, which the destroy below removes first and it after.
      if (warm !== undefined) await this.warm.discard(warm);
      // Every step has finished (settled), so the cleanup finds all they made.
      await this.destroy(names.name).catch((cleanupErr: unknown) => {
        this.deps.logger.warn({ sandbox: names.name, err: cleanupErr }, 'cleanup after failed create did not finish');
      });
      if (replaced !== undefined) {
        throw new SandboxError('conflict', `${names.name} was changed by another call while this create ran (${replaced}); retry.`, { cause: err });
      }
      throw asConflict(err, names.name, 'create');
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
    // Read once, while the container still names it: a later round finds the container gone.
    const warm = await this.warmNetworkOf(namesFor(name).container);
    for (let round = 1; ; round += 1) {
      try {
        await this.removeAll(name, warm);
        return;
      } catch (err) {
        if (round === DESTROY_ROUNDS || !concurrentChange(err)) throw asConflict(err, name, 'destroy');
        this.deps.logger.warn({ sandbox: name, err }, 'a concurrent call changed the sandbox during its destroy; removing again');
      }
    }
  }

  /** `warm`: the warm network the sandbox was made on, if any (warmNetworkOf). */
  private async removeAll(name: string, warm: NetworkView | undefined): Promise<void> {
    const { engine } = this.deps;
    const names = namesFor(name);
    // Networks and volumes can only go once no container uses them (a hand-over container left
    // behind by a controller that died holds the workspace too).
    await Promise.all([engine.removeContainer(names.container), engine.removeContainer(names.egress), engine.removeContainer(names.handover)]);
    // Every network of its name with its labels (a create race can have made two); ephemeral
    // volumes only: a persistent workspace is named cap-ws.<key> and stays.
    await Promise.all([
      removeSandboxNetworks(this.deps, names, warm),
      engine.removeVolume(names.workspaceVolume),
      engine.removeVolume(names.skillsVolume),
      engine.removeVolume(names.buildingVolume),
      engine.removeVolume(names.egressPolicyVolume),
    ]);
  }

  /**
   * The warm network the sandbox container was made on, read before the container goes: its
   * label, believed only when the container is on that network (an image's labels are merged into
   * the container's, and a create that refused such an image still cleans up).
   */
  private async warmNetworkOf(container: string): Promise<NetworkView | undefined> {
    const view = await this.deps.engine.inspectContainer(container);
    if (view === undefined) return undefined;
    const warm = await ownWarmNetwork(this.deps, view.labels);
    const mode = view.hostConfig.NetworkMode;
    return warm !== undefined && (mode === warm.id || mode === warm.name) ? warm : undefined;
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

  /**
   * Creates the sandbox's volumes; resolves to whether its workspace is on a volume plugin's
   * driver: the deployment's `volumeDriver` for a new one, and for a persistent workspace that
   * exists already, the driver it was made with (the config may have changed since).
   */
  private async createVolumes(plan: SandboxPlan): Promise<boolean> {
    const { engine } = this.deps;
    // A persistent workspace that exists already is looked at before anything is made: one that
    // cannot hold the spec's disk limit fails the create with nothing of its own to undo.
    const existing = plan.persistentWorkspace === undefined ? undefined : await engine.inspectVolume(plan.workspaceVolume);
    if (existing !== undefined) requireWorkspaceSize(plan.workspaceVolume, existing, plan.limits.volumeSize);
    const creates: Promise<void>[] = [
      engine.createVolume(volumeBody(plan.names.skillsVolume, plan.labels, undefined, undefined)),
      // Before the sandbox container, which waits for these: see SandboxNames.buildingVolume.
      engine.createVolume(volumeBody(plan.names.buildingVolume, plan.labels, undefined, undefined)),
    ];
    if (existing === undefined) {
      const labels = plan.persistentWorkspace?.labels ?? plan.labels;
      creates.push(engine.createVolume(volumeBody(plan.workspaceVolume, labels, plan.volumeDriver, plan.limits.volumeSize)));
    }
    await Promise.all(creates);
    const driver = existing?.driver ?? plan.volumeDriver;
    return driver !== undefined && driver !== 'local';
  }
}
