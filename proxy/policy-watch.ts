/**
 * Watches the policy file so that an edit applies without SIGHUP, including an edit behind a
 * symlink. What the configured name resolves to can change with no change to that name's own
 * directory: a Kubernetes ConfigMap volume gives `policy.yaml -> ..data/policy.yaml`, `..data` a
 * link to a timestamped directory that is swapped by renaming a new link over it, and the old
 * directory removed; an operator may point `etc/policy.yaml` at `data/policy.yaml` and edit the
 * target in place or by rename. A watch on the configured file's directory alone sees none of the
 * edits of the target, and a removed host stayed reachable until SIGHUP.
 *
 * So every directory whose entries decide what the file is gets watched: the directory of each
 * symlink met while resolving the name, and the directory of the file it reaches. The set is
 * worked out again after every event (a swapped link brings new directories; a directory removed
 * and made again needs a new watch), and every few seconds, which also
 * catches what no watch reports (a watch that could not be set up, a parent directory renamed):
 * the file's identity and times are compared then, so watching never silently stops.
 */
import { lstatSync, readlinkSync, statSync, watch, type FSWatcher } from 'node:fs';
import path from 'node:path';
import type { Logger } from './record/index.js';

/** Editors and config managers write in several steps: one reload per burst of events. */
const DEBOUNCE_MS = 200;
/** How often the watches are checked and the file compared, whatever the watches say. */
export const RECHECK_MS = 5_000;
/** Symlinks followed before giving up, as the kernel's ELOOP limit does. */
const MAX_LINKS = 40;

export interface PolicyWatch {
  close(): void;
}

/**
 * The directories whose entries decide what `file` is, each with the entry names in it that
 * matter: for every symlink met while resolving `file`, its directory and its name; for the file
 * reached, its directory and its name; for a name that does not exist, the directory it would
 * appear in. Directories are real paths (no symlink in them), so a watch on one stays on it.
 */
export function resolutionDirs(file: string): Map<string, Set<string>> {
  const dirs = new Map<string, Set<string>>();
  const note = (dir: string, name: string): void => {
    const names = dirs.get(dir) ?? new Set<string>();
    names.add(name);
    dirs.set(dir, names);
  };
  const pending = path.resolve(file).split(path.sep).filter((p) => p !== '');
  let at = path.parse(path.resolve(file)).root; // resolved so far: a real path
  let links = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '.') continue;
    // `at` holds no symlink, so its lexical parent is its real parent.
    if (part === '..') {
      at = path.dirname(at);
      continue;
    }
    const next = path.join(at, part);
    let isLink: boolean;
    try {
      isLink = lstatSync(next).isSymbolicLink();
    } catch {
      note(at, part); // missing (or unreadable): watch for it to appear
      return dirs;
    }
    if (!isLink) {
      if (pending.length === 0) note(at, part);
      at = next;
      continue;
    }
    note(at, part);
    if ((links += 1) > MAX_LINKS) return dirs;
    let target: string;
    try {
      target = readlinkSync(next);
    } catch {
      return dirs; // swapped away between lstat and readlink: the next event or check looks again
    }
    pending.unshift(...target.split(path.sep).filter((p) => p !== ''));
    if (path.isAbsolute(target)) at = path.parse(target).root;
  }
  return dirs;
}

/** What the configured name is right now: the directories with their inodes, and the file's identity and times. */
function fingerprint(file: string, dirs: ReadonlyMap<string, unknown>): string {
  const parts = [...dirs.keys()].sort().map((dir) => `${dir}@${inode(dir)}`);
  try {
    const s = statSync(file, { bigint: true });
    parts.push(`${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`);
  } catch (err) {
    parts.push(`missing:${(err as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  return parts.join('|');
}

function inode(dir: string): string {
  try {
    const s = statSync(dir, { bigint: true });
    return `${s.dev}:${s.ino}`;
  } catch {
    return 'missing';
  }
}

interface DirWatch {
  readonly watcher: FSWatcher;
  /** The entries of the directory that decide what the file is. */
  readonly names: ReadonlySet<string>;
}

/**
 * A watch of `dir`, or undefined when it cannot be set up; each failure is logged once (`failed`
 * holds the last one per directory). A watch that fails later is closed and `dropped`.
 */
function watchDirectory(dir: string, log: Logger, failed: Map<string, string>, onEvent: (name: string | null) => void, dropped: () => void): FSWatcher | undefined {
  try {
    const watcher = watch(dir, { persistent: false }, (_event, name) => onEvent(name));
    watcher.on('error', (err) => {
      log.warn({ event: 'policy_watch_failed', dir, err: err.message }, `the watch of ${dir} failed; it is set up again at the next check, and SIGHUP still reloads`);
      watcher.close();
      dropped();
    });
    failed.delete(dir);
    return watcher;
  } catch (err) {
    const message = (err as Error).message;
    if (failed.get(dir) !== message) {
      failed.set(dir, message);
      log.warn({ event: 'policy_watch_failed', dir, err: message }, `cannot watch ${dir} for policy changes; the file is compared every ${RECHECK_MS / 1000} s, and SIGHUP still reloads`);
    }
    return undefined;
  }
}

/**
 * Calls `reload` after the policy file (or what it resolves through) changes. Never throws and
 * never ends the process: a watch that fails is logged and tried again at the next check, while
 * SIGHUP keeps working.
 */
export function watchPolicyFile(file: string, log: Logger, reload: (why: string) => void): PolicyWatch {
  const configured = path.resolve(file);
  const watches = new Map<string, DirWatch>();
  // Last failure logged per directory, so a watch that keeps failing is logged once, not every check.
  const failed = new Map<string, string>();
  let relevant = false;
  let timer: NodeJS.Timeout | undefined;
  let closed = false;

  const onEvent = (dir: string, name: string | null): void => {
    if (closed) return;
    // A name that decides what the file is, or one Node could not tell (null): reload for sure,
    // once the burst of events is over. Any other event still leads to a check (the watched
    // directory itself may have gone), without putting off one already due: a directory where
    // other files change all the time must not hold a reload back.
    const decisive = name === null || watches.get(dir)?.names.has(name) === true;
    if (decisive) relevant = true;
    if (!decisive && timer !== undefined) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      check();
    }, DEBOUNCE_MS);
  };

  // Every check sets up every watch afresh: a directory removed and made again can come back
  // with the same inode number, and a watch on the old one would never fire again. A change in the
  // moment between two watches is still seen: the fingerprint is taken after the new watches.
  const sync = (): Map<string, Set<string>> => {
    for (const w of watches.values()) w.watcher.close();
    watches.clear();
    const wanted = resolutionDirs(configured);
    for (const [dir, names] of wanted) {
      const watcher = watchDirectory(dir, log, failed, (name) => onEvent(dir, name), () => {
        if (watches.get(dir)?.watcher === watcher) watches.delete(dir);
      });
      if (watcher !== undefined) watches.set(dir, { watcher, names });
    }
    return wanted;
  };

  let last = fingerprint(configured, sync());

  function check(): void {
    if (closed) return;
    try {
      const now = fingerprint(configured, sync());
      const reloadNow = relevant || now !== last;
      relevant = false;
      last = now;
      if (reloadNow) reload('file changed');
    } catch (err) {
      // Nothing here should throw; if it does, the watch goes on at the next check.
      log.warn({ event: 'policy_watch_failed', err: (err as Error).message }, 'checking the policy file failed; SIGHUP still reloads');
    }
  }

  const recheck = setInterval(check, RECHECK_MS);
  recheck.unref();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      clearInterval(recheck);
      for (const w of watches.values()) w.watcher.close();
      watches.clear();
    },
  };
}
