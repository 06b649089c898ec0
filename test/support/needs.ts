/**
 * The one rule for tests that need something of the machine (a Docker engine, an image, a
 * network namespace, runsc, openssl, root): outside CI a missing need skips the test and says
 * why; under CI it fails with the same words. CI's machine is set up to have every need
 * (`.ci/run` installs and starts them), so a need missing there is a broken setup, and a test
 * that skipped would pass without having run.
 *
 * "Under CI" is defined once, here: the environment variable CI is `true` or `1` (what `.ci/run`
 * exports and what CI services set).
 *
 * `npm run test:unit` (scripts/test-unit.mjs) runs every test that needs no Docker engine and no
 * network or PID namespace (which take root): it leaves out each file that declares such a need with
 * `fileNeeds`, and sets CAPYBARA_TEST_UNIT, under which a single test needing the engine (in a
 * file whose other tests are unit tests) skips, CI or not.
 *
 * API:
 *
 *   underCi()                  true under CI
 *   await fileNeeds(t, need)   at the top of a file whose every test needs `need` ('engine',
 *                              'netns' or 'pidns'), after the imports: the file's tag for the unit run, and
 *                              its gate. Outside CI an unmet need skips the whole file with the
 *                              reason (a skipped suite, `1..0 # skipped: ...`), under CI it fails;
 *                              either way nothing after the call runs.
 *   leftOutOfUnitRun(t, need)  in the unit run: t skips, CI or not, and this returns true (a test
 *                              with `need` in a file of unit tests calls it first):
 *                                if (leftOutOfUnitRun(t, 'engine')) return null;
 *   engineSocketPath()         the engine's socket: DOCKER_HOST's when it names a unix socket
 *   engineProblem()            why no Docker engine answers there, or undefined
 *   needUnmet(t, reason)       outside CI: t skips with `reason`; under CI: t fails with it.
 *                              Call it inside the test and return:
 *                                if (problem) return needUnmet(t, problem);
 *   toolMissing(cmd, args, how)  the reason to give when a command-line tool is not installed
 *   platformCannot(t, reason)  skips everywhere, CI included. Only for a precise probe of the
 *                              platform itself (not of this project's code) that proved the
 *                              machine cannot do the thing at all, e.g. "runsc cannot start any
 *                              container here", with the probe's finding in `reason`.
 *   kustomizeMissing()         why `kubectl kustomize` cannot run here, or undefined. The one tool
 *                              given to platformCannot: kubectl comes with the machine's image or
 *                              not at all (.ci/run installs from Debian's apt, which has no
 *                              kubectl), so a machine without it cannot render at all.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import http from 'node:http';
import type { Test } from 'tap';

/** What a whole test file can need of the machine, beyond Node and the tools it names itself. */
export type Need = 'engine' | 'netns' | 'pidns';

const UNIT_RUN = 'CAPYBARA_TEST_UNIT';

const NEED_WORDS: Record<Need, string> = {
  engine: 'a Docker engine',
  netns: 'network namespaces (root)',
  pidns: 'a PID namespace (root)',
};

export function underCi(): boolean {
  return process.env.CI === 'true' || process.env.CI === '1';
}

function unitRun(): boolean {
  return process.env[UNIT_RUN] === '1';
}

/**
 * Skips the rest of `t` with the reason: all of it (`1..0 # skipped: ...`) when it has asserted
 * nothing yet, else by one skipped point (a plan of 0 after assertions is itself a failure).
 */
function skip(t: Test, reason: string): void {
  if (t.counts.total === 0) t.plan(0, `skipped: ${reason}`);
  else t.pass(`skipped: ${reason}`, { skip: reason });
}

export function leftOutOfUnitRun(t: Test, need: Need): boolean {
  if (!unitRun()) return false;
  skip(t, `needs ${NEED_WORDS[need]}, which npm run test:unit leaves out`);
  return true;
}

export function needUnmet(t: Test, reason: string): void {
  if (underCi()) {
    t.fail(`cannot run under CI: ${reason}`);
  } else {
    skip(t, reason);
  }
}

export function platformCannot(t: Test, reason: string): void {
  skip(t, `this machine cannot: ${reason}`);
}

/** Path of the engine's own socket, from DOCKER_HOST when it names a unix socket. */
export function engineSocketPath(): string {
  const host = process.env.DOCKER_HOST;
  if (host?.startsWith('unix://')) return host.slice('unix://'.length);
  return '/var/run/docker.sock';
}

/** Why no Docker engine answers its ping within 5 s, or undefined when one does. */
export function engineProblem(): Promise<string | undefined> {
  const socketPath = engineSocketPath();
  const unreachable = (why: string): string => `no Docker engine answers at ${socketPath} (${why}); start one with \`bash scripts/docker-up.sh\``;
  return new Promise((resolve) => {
    const req = http.get({ socketPath, path: '/_ping', timeout: 5_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200 ? undefined : unreachable(`its ping answered ${res.statusCode}`));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 5s')));
    req.on('error', (err) => resolve(unreachable(err.message)));
  });
}

/** Why no network (and mount) namespace with a working `ip` can be made here, or undefined. */
function namespaceProblem(): string | undefined {
  const probe = spawnSync('unshare', ['-n', '-m', '--', 'ip', 'link', 'set', 'lo', 'up'], { encoding: 'utf8' });
  if (probe.status === 0) return undefined;
  return `cannot create network and mount namespaces here (unshare -n -m: ${(probe.stderr || probe.error?.message || 'failed').trim()})`;
}

/** Why no PID namespace (with its own /proc) can be made here, or undefined. */
function pidNamespaceProblem(): string | undefined {
  const probe = spawnSync('unshare', ['-fp', '--mount-proc', 'true'], { encoding: 'utf8' });
  if (probe.status === 0) return undefined;
  return `cannot create a PID namespace here (unshare -fp --mount-proc: ${(probe.stderr || probe.error?.message || 'failed').trim()})`;
}

const PROBES: Record<Need, () => Promise<string | undefined> | string | undefined> = {
  engine: engineProblem,
  netns: namespaceProblem,
  pidns: pidNamespaceProblem,
};

export async function fileNeeds(t: Test, need: Need): Promise<void> {
  if (!leftOutOfUnitRun(t, need)) {
    const problem = await PROBES[need]();
    if (problem === undefined) return;
    needUnmet(t, problem);
  }
  // A top-level await that never settles ends the file's module here: none of its tests (which
  // could only fail for the same reason) is defined. Node exits once tap has written the file's
  // result, with this code rather than 13 (an unsettled top-level await).
  process.exitCode = underCi() && !unitRun() ? 1 : 0;
  await new Promise<never>(() => undefined);
}

/** Why `kubectl kustomize` cannot be run here, or undefined (see the header: skipped everywhere). */
export function kustomizeMissing(): string | undefined {
  return toolMissing('kubectl', ['kustomize', '--help'], 'it is not in Debian\'s apt, so .ci/run cannot install it; kubectl 1.14 or later has kustomize');
}

/** Why the command-line tool `command` cannot be run here, or undefined when `command ...versionArgs` runs. */
export function toolMissing(command: string, versionArgs: readonly string[], install: string): string | undefined {
  try {
    execFileSync(command, [...versionArgs], { stdio: 'ignore' });
    return undefined;
  } catch {
    return `no ${command} command on PATH (${install})`;
  }
}
