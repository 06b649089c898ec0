/**
 * One change to a sandbox's Docker objects at a time: create, suspend, resume, destroy and the
 * recovery before an exec run in call order per sandbox name, so a destroy cannot land in the
 * middle of a resume (which would rebuild what it just removed) and two creates of one id cannot
 * remove each other's objects. Commands themselves are not queued: only the steps that change
 * which objects exist.
 */
export class SandboxLanes {
  /** The last queued change per name; removed once it settles and nothing follows it. */
  private readonly tails = new Map<string, Promise<void>>();

  run<T>(name: string, change: () => Promise<T>): Promise<T> {
    const before = this.tails.get(name) ?? Promise.resolve();
    const result = before.then(change).finally(() => {
      if (this.tails.get(name) === tail) this.tails.delete(name);
    });
    const tail: Promise<void> = result.then(settled, settled);
    this.tails.set(name, tail);
    return result;
  }

  /** Names with a change queued or running (for tests: the map must not grow without end). */
  get busy(): number {
    return this.tails.size;
  }
}

function settled(): void {}

/**
 * The lane of a persistent workspace (its volume's name): the creates, starts and removal of one
 * workspace run one at a time in a process, so that a removal cannot land between a create's look
 * at the volume and its container (dockerd would make a plain volume of that name in its place,
 * without the deployment's driver or size), and two sandboxes cannot both pass the check that no
 * other runs on it. Sandbox names hold no ":", so no sandbox's lane is one of these.
 */
export function workspaceLane(volume: string): string {
  return `workspace:${volume}`;
}
