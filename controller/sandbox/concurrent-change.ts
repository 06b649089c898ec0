/**
 * Which engine answers mean that a sandbox's objects changed under a call. Within one process the
 * lanes (sandbox-lanes.ts) keep the changes to one sandbox in order; across processes nothing
 * does, so a create, destroy or recovery can meet objects another controller made or removed a
 * moment before: a name in use, an object gone between two calls, a network still in use. Such a
 * call ends as `conflict` (retry), never as the engine's raw 404, 409 or 403.
 */
import { isEngineStatusError, type SandboxEngine } from '../docker/index.js';
import { SandboxError, isSandboxError } from '../spec/index.js';

/** Docker itself (not the socket proxy) answered `status` with a message matching `words`. */
export function dockerSays(err: unknown, status: number, words: RegExp): boolean {
  return isEngineStatusError(err) && !err.byProxy && err.status === status && words.test(err.message);
}

/** An answer that only a concurrent change explains. */
export function concurrentChange(err: unknown): boolean {
  if (!isEngineStatusError(err) || err.byProxy) return false;
  switch (err.status) {
    // A name in use, a removal already in progress, a container that stopped or was paused.
    case 409:
      return true;
    // Made moments ago by this call or found by it, removed since (a missing image is no such case).
    case 404:
      return !/no such image/i.test(err.message);
    // A network still in use, an endpoint or address another call took.
    case 403:
      return /active endpoints|already exists|in use/i.test(err.message);
    // A network name several networks share (made before networks were addressed by id).
    case 400:
      return /ambiguous/i.test(err.message);
    // A container another call is removing, which a network connect or disconnect meets
    // ("is marked for removal and cannot be connected or disconnected to the network"), and an
    // exec start too (a recovery reading a proxy's registration: "is not running: Removal In
    // Progress").
    case 500:
      return /marked for removal|Removal In Progress/i.test(err.message);
    default:
      return false;
  }
}

/** `err` as the call's result: `conflict` when a concurrent change explains it. */
export function asConflict(err: unknown, name: string, what: string): unknown {
  if (isSandboxError(err, 'conflict')) return err;
  if (!concurrentChange(err)) return err;
  return new SandboxError(
    'conflict',
    `${name} was changed by another call while this ${what} ran (${(err as Error).message}); retry.`,
    { cause: err },
  );
}

/**
 * How long a create or recovery whose proxy probe failed watches for another call's removal to
 * show: a destroy takes the registration away first and kills the probe with the container, and
 * the engine can still call that container running for a moment after the probe has ended.
 */
export const CHANGE_SHOWS_MS = 2_000;
const CHANGE_POLL_MS = 200;

/**
 * Which of the containers `made` (name to id) is gone, going, or another one now, if any; watched
 * for up to `watchMs` before the answer is none.
 */
export async function replacedMeanwhile(engine: SandboxEngine, made: ReadonlyMap<string, string>, watchMs: number): Promise<string | undefined> {
  const deadline = Date.now() + watchMs;
  for (;;) {
    for (const [name, id] of made) {
      const now = await engine.inspectContainer(name).catch(() => undefined);
      if (now === undefined) return `container ${name} was removed`;
      if (now.id !== id) return `container ${name} was replaced`;
      // Only a removal request puts a container in this state, and neither a create nor a
      // recovery makes one of the container it watches.
      if (now.status === 'removing') return `container ${name} is being removed`;
    }
    if (Date.now() >= deadline) return undefined;
    await new Promise((resolve) => setTimeout(resolve, CHANGE_POLL_MS));
  }
}
