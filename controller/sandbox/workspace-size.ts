/**
 * A persistent workspace outlives the sandbox that made it, and a create finds it as that
 * sandbox (or the deployment of its day) left it: on the local driver, which caps nothing, or on
 * a volume plugin with the size it was made with. dockerd keeps a volume's options from its
 * create, and the controller never makes one again, so a spec's `diskMb` is in force on such a
 * workspace only when the size it was made with is at most that: else the create would be
 * accepted with a disk limit that is not applied, which limits.ts refuses for every other case.
 */
import type { VolumeView } from '../docker/index.js';
import { SandboxError } from '../spec/index.js';

/** `<n>M`, as limits.ts writes a volume's size; anything else is not a size the controller can compare. */
function megabytes(size: string | undefined): number | undefined {
  const m = size === undefined ? null : /^([1-9][0-9]{0,9})M$/.exec(size);
  return m === null ? undefined : Number(m[1]);
}

/**
 * Refuses (`limit_not_expressible`) an existing workspace `view` that does not hold `volumeSize`
 * (the plan's `size=`; undefined: no disk limit asked, any workspace serves). A size it cannot
 * read, on either side, is refused too: only a comparison that holds lets the workspace serve.
 */
export function requireWorkspaceSize(volume: string, view: VolumeView, volumeSize: string | undefined): void {
  if (volumeSize === undefined) return;
  const asked = megabytes(volumeSize);
  const made = view.driver === 'local' ? undefined : megabytes(view.options.size);
  if (asked !== undefined && made !== undefined && made <= asked) return;
  const how = view.driver === 'local'
    ? 'on the local driver, which has no size limit'
    : view.options.size === undefined
      ? `on ${view.driver} without a size`
      : `on ${view.driver} with size=${view.options.size}`;
  throw new SandboxError(
    'limit_not_expressible',
    `limits.diskMb (size=${volumeSize}) cannot be enforced on the persistent workspace ${volume}: it was made ${how}, which a later create does not change. Omit diskMb, or remove the workspace (destroyWorkspace) to make it again with this limit.`,
  );
}
