/**
 * dockerd merges the image's labels into the container's, for every key the create body does
 * not set: an image carrying a label of the controller's (`dev.capybara.sandbox.workspace=KEY`,
 * `dev.capybara.sandbox.egress-isolation=shared`, ...) would put it on the sandbox, and
 * everything that reads the container's labels would believe it (another sandbox's persistent
 * workspace reported in use by this one, a shard sought for a sandbox with a proxy of its own).
 * A container as made, at create and at a recovery's rebuild (whose image tag may name another
 * image by then), must carry no controller label but its body's.
 */
import { LABEL_SANDBOX, SandboxError } from '../spec/index.js';
import type { BuildDeps } from './build-deps.js';

/** The controller's label keys on `labels` that `own` (the create body's) does not give them as they are. */
export function foreignLabels(labels: Readonly<Record<string, string>>, own: Readonly<Record<string, string>>): string[] {
  return Object.keys(labels).filter((k) => (k === LABEL_SANDBOX || k.startsWith(`${LABEL_SANDBOX}.`)) && own[k] !== labels[k]);
}

/** Refuses (invalid_spec) a container `container`, made from `image`, whose labels are not only `own`'s. */
export async function requireOwnLabels(deps: BuildDeps, container: string, image: string, own: Readonly<Record<string, string>>): Promise<void> {
  const view = await deps.engine.inspectContainer(container);
  if (view === undefined) return;
  const foreign = foreignLabels(view.labels, own);
  if (foreign.length === 0) return;
  throw new SandboxError(
    'invalid_spec',
    `The sandbox spec was refused: spec.image ${JSON.stringify(image)} carries labels that are the controller's own (${foreign.map((k) => JSON.stringify(k)).join(', ')}), which dockerd would put on the sandbox's container; use an image without them.`,
  );
}
