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
 * API:
 *
 *   underCi()                  true under CI
 *   needUnmet(t, reason)       outside CI: t skips with `reason`; under CI: t fails with it.
 *                              Call it inside the test and return:
 *                                if (problem) return needUnmet(t, problem);
 *   toolMissing(cmd, args, how)  the reason to give when a command-line tool is not installed
 *   platformCannot(t, reason)  skips everywhere, CI included. Only for a precise probe of the
 *                              platform itself (not of this project's code) that proved the
 *                              machine cannot do the thing at all, e.g. "runsc cannot start any
 *                              container here", with the probe's finding in `reason`.
 */
import { execFileSync } from 'node:child_process';
import type { Test } from 'tap';

export function underCi(): boolean {
  return process.env.CI === 'true' || process.env.CI === '1';
}

export function needUnmet(t: Test, reason: string): void {
  if (underCi()) {
    t.fail(`cannot run under CI: ${reason}`);
  } else {
    t.plan(0, `skipped: ${reason}`);
  }
}

export function platformCannot(t: Test, reason: string): void {
  t.plan(0, `skipped: this machine cannot: ${reason}`);
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
