/**
 * Handing a sandbox's workspace volume to the sandbox user (docker/workspace-owner.ts's archive),
 * through a container made for that alone: `cap-<id>.handover`, of the sandbox's own image (on
 * the engine already), never started, with the workspace volume as its one mount point and no
 * network. The archive goes into it, and it is removed at once, whatever happened.
 *
 * Why not into the sandbox container: for an archive, dockerd mounts every mount point of the
 * container on the host and afterwards detaches each on the path it resolved, following whatever
 * symlink is in that path by then. With several mount points, one can lie inside another's
 * content (through the image's own symlinks), which a process sharing that volume can swap for a
 * symlink to a host path. With one mount point there is no other mount for it to lie in, whatever
 * the image: the socket proxy's archive proof (haproxy/archive-proof.lua) admits that shape alone.
 *
 * A hand-over container left behind (a controller that died in between) is taken for a leftover:
 * the next hand-over removes it first, destroy removes it, and gc removes it with its sandbox.
 */
import { engineStatus, handoverContainerBody, WORKSPACE, type ContainerView } from '../docker/index.js';
import { namesFor, SandboxError } from '../spec/index.js';
import type { BuildDeps } from './build-deps.js';
import { createContainerPullingOnce } from './build-steps.js';

/** Sandbox `name`'s workspace and image, and the labels of its resources (gc finds a leftover by them). */
export interface HandOver {
  readonly name: string;
  readonly volume: string;
  readonly image: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** Gives the sandbox's workspace volume to the sandbox user. */
export async function handOverWorkspace(deps: BuildDeps, handOver: HandOver): Promise<void> {
  const { engine, config } = deps;
  const helper = namesFor(handOver.name).handover;
  const body = handoverContainerBody(handOver.image, handOver.volume, handOver.labels, { logMaxSizeMb: config.logMaxSizeMb, logMaxFiles: config.logMaxFiles });
  let id: string;
  try {
    id = await createContainerPullingOnce(deps, helper, handOver.image, body);
  } catch (err) {
    // One left behind by an earlier hand-over that never finished: removed, and made again.
    if (engineStatus(err) !== 409) throw err;
    await engine.removeContainer(helper);
    id = await createContainerPullingOnce(deps, helper, handOver.image, body);
  }
  let handed = false;
  try {
    await engine.giveWorkspaceToSandboxUser(helper);
    handed = true;
  } catch (err) {
    // Removed or replaced meanwhile: another call (a destroy, a create racing on the same id)
    // changed the sandbox under this one, which dockerd answers as it happens to (404, 500).
    // An engine that cannot be asked either leaves the hand-over's own error standing.
    const now = await engine.inspectContainer(helper).catch(() => null);
    if (now !== null && now?.id !== id) throw new SandboxError('conflict', `The hand-over container of ${handOver.name} was removed by another call while the workspace was handed over; retry.`, { cause: err });
    throw err;
  } finally {
    // A removal that fails after a failed hand-over does not hide why the hand-over failed (the
    // next one, destroy or gc removes the container).
    await engine.removeContainer(helper).catch((err: unknown) => {
      if (handed) throw err;
    });
  }
}

/** The volume a sandbox container has at the workspace, from its inspect data. */
export function workspaceVolumeOf(view: Pick<ContainerView, 'hostConfig'>, name: string): string {
  const mounts = Array.isArray(view.hostConfig.Mounts) ? (view.hostConfig.Mounts as Array<Record<string, unknown>>) : [];
  const source = mounts.find((m) => m.Type === 'volume' && m.Target === WORKSPACE)?.Source;
  if (typeof source !== 'string' || source === '') throw new SandboxError('engine_error', `Sandbox ${name} has no workspace volume at ${WORKSPACE} in its container's record; destroy it and create it again.`);
  return source;
}
