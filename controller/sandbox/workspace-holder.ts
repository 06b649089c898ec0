/**
 * A persistent workspace is mounted by at most one running sandbox at a time, unless the
 * deployment allows sharing (`sharedWorkspaces`). Two live sandboxes on one volume each see what
 * the other writes as it writes it, which a conversation does not expect, and a volume two
 * containers share is what the copy-up attack needed (SECURITY.md, section 2; NoCopy closes that
 * either way). Asked right before a sandbox container starts, of the engine, by the label every
 * sandbox on a persistent workspace carries: two creates in different controller processes can
 * still both pass at the same instant (the engine has no lock to take), which the docs say.
 */
import { LABEL_WORKSPACE_KEY, SandboxError } from '../spec/index.js';
import type { BuildDeps } from './build-deps.js';

/** Refuses with `workspace_in_use` while a running container other than `name` holds `key`. */
export async function requireWorkspaceFree(deps: BuildDeps, name: string, key: string | undefined): Promise<void> {
  if (key === undefined || deps.config.sharedWorkspaces) return;
  const holders = (await deps.engine.listRunningContainers([`${LABEL_WORKSPACE_KEY}=${key}`])).filter((c) => c.name !== name);
  if (holders.length === 0) return;
  throw new SandboxError(
    'workspace_in_use',
    `The persistent workspace ${JSON.stringify(key)} is in use by the running sandbox ${holders.map((h) => h.name).join(', ')}: suspend or destroy it first, ` +
      'or ask the operator for extensionConfig."sandbox-docker".sharedWorkspaces to let several sandboxes run on one workspace.',
  );
}
