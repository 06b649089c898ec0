/**
 * A registry host name that resolves to 127.0.0.1 for dockerd, so that a pull the socket proxy
 * allows (a listed registry is a name, never an address) still sends nothing off the machine:
 * dockerd resolves registry names with the host's resolver, which reads /etc/hosts first. The name
 * is this run's own (`<runId>.registry.capybara.test`), added as one line of /etc/hosts and taken
 * out again at teardown. Writers of /etc/hosts here take a lock directory under /run, so that two
 * test files editing it at once lose neither line. Needs root, as every engine test has here.
 */
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import type { Test } from 'tap';

const HOSTS = '/etc/hosts';
const LOCK = '/run/capybara-test-hosts.lock';
const LOCK_WAIT_MS = 10_000;
/** How long Go's resolver trusts its copy of /etc/hosts (net/hosts.go: cacheMaxAge), and a margin. */
const HOSTS_CACHE_MS = 5_500;

async function withLock<T>(change: () => T): Promise<T> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  try {
    return change();
  } finally {
    rmdirSync(LOCK);
  }
}

/** Why the name cannot be set up here, or undefined. */
export function loopbackNameProblem(): string | undefined {
  return process.getuid?.() === 0 ? undefined : `mapping a test registry name in ${HOSTS} needs root`;
}

/** Maps a name of this run to 127.0.0.1 until the test ends; returns it. */
export async function loopbackName(t: Test, runId: string): Promise<string> {
  const name = `${runId}.registry.capybara.test`;
  const line = `127.0.0.1 ${name} # capybara test ${runId}`;
  await withLock(() => writeFileSync(HOSTS, `${readFileSync(HOSTS, 'utf8').replace(/\n?$/, '\n')}${line}\n`));
  t.teardown(() => withLock(() => writeFileSync(HOSTS, readFileSync(HOSTS, 'utf8').split('\n').filter((l) => l !== line).join('\n'))));
  // dockerd (Go's resolver) keeps /etc/hosts for 5 s after each read without looking at it again:
  // on a busy engine it would not know the name yet.
  await new Promise((resolve) => setTimeout(resolve, HOSTS_CACHE_MS));
  return name;
}
