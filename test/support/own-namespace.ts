/**
 * For the driver programs that change their machine (dns-driver.ts bind-mounts /etc/resolv.conf,
 * netns-driver.ts puts public addresses on loopback): they must run only inside the namespaces
 * their test made for them. Run by hand, or picked up by a "run every .ts file" loop, they would
 * change the host's own resolver or routes (this happened: a stray run left every host lookup on
 * the machine pointing at 127.0.0.1). Each kind named must differ from the parent's: the test
 * spawns `unshare`, which execs the driver inside the new namespaces, so the parent is the test in
 * the machine's own. (PID 1's links are not readable in every container.) When it cannot tell,
 * it refuses too.
 */
import { readlinkSync } from 'node:fs';

export function requireOwnNamespaces(kinds: readonly ('net' | 'mnt')[]): void {
  for (const kind of kinds) {
    let own: string;
    let parent: string;
    try {
      own = readlinkSync(`/proc/self/ns/${kind}`);
      parent = readlinkSync(`/proc/${process.ppid}/ns/${kind}`);
    } catch (err) {
      process.stderr.write(`refusing to run: cannot compare this process's ${kind} namespace with its parent's (${String(err)})\n`);
      process.exit(2);
    }
    if (own === parent) {
      process.stderr.write(`refusing to run: this program changes its ${kind} namespace and must run inside one its test made (unshare), not the machine's own\n`);
      process.exit(2);
    }
  }
}
