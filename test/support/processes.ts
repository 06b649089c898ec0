/**
 * This machine's processes as /proc shows them, for tests that judge what is still running. A
 * zombie counts as dead: on a machine whose PID 1 reaps slowly, a killed process keeps its entry
 * for a while, and a test must not wait on the reaper.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** State and parent of a process, or undefined when it is gone. */
function statOf(pid: number | string): { state: string; ppid: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ")".
    const [state = '', ppid = ''] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state, ppid: Number(ppid) };
  } catch {
    return undefined;
  }
}

function isLive(state: string | undefined): boolean {
  return state !== undefined && state !== 'Z' && state !== 'X';
}

/** Present and neither a zombie nor dead. */
export function alive(pid: number): boolean {
  return isLive(statOf(pid)?.state);
}

function livePids(): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry) && alive(Number(entry))).map(Number);
}

/** The live processes whose parent is `pid`. */
export function childrenOf(pid: number): number[] {
  return livePids().filter((p) => statOf(p)?.ppid === pid);
}

/** The live processes whose environment holds `entry` (`NAME=value`), of those this process may read. */
export function liveWithEnv(entry: string): number[] {
  return livePids().filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(entry);
    } catch {
      return false; // gone meanwhile, or not ours to read
    }
  });
}
