import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Starts a built command (dist/…/*.js) with plain node, as operators run it. The test runner puts
 * its process tracker (tap's processinfo, module hooks on a loader thread) into the NODE_OPTIONS
 * of every child a test spawns, even one given an environment of its own; under it each start of
 * the egress proxy cost twice the CPU (about 1.5 s instead of 0.7 s) and ran with hooks and exit
 * handlers no operator has. `env -u NODE_OPTIONS` drops them; env execs node, so the child's pid,
 * its signals and its exit status are node's own.
 */

/** The file and argv for spawn/spawnSync; `.flat()` gives the argv to put after a wrapper such as prlimit. */
export function plainNode(script: string, args: readonly string[]): [file: string, argv: string[]] {
  return ['env', ['-u', 'NODE_OPTIONS', process.execPath, script, ...args]];
}

/**
 * The built egress command as it ships, the one-module bundle (scripts/build.mjs; `npm test` builds
 * first): starting it through the TypeScript loader would cost seconds per start.
 */
export const EGRESS_CLI = fileURLToPath(new URL('../../dist/proxy/capybara-egress.mjs', import.meta.url));
/** The only variable an egress command run by a test inherits: the rest is the test's to give. */
export const EGRESS_BASE_ENV: Readonly<Record<string, string>> = { PATH: process.env.PATH ?? '' };

/** What a command that ran to its end said. */
export interface CliRun {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs the built egress command to its end, with `env` beside PATH only (and under an open-file
 * limit of `nofile`, when given). Never spawnSync: that
 * would stop this process's event loop for the whole run, and with it every subtest beside it
 * (a proxy it runs, a deadline it measures).
 */
export function runEgressCli(args: string[], env: Record<string, string> = {}, nofile?: number): Promise<CliRun> {
  const [node, nodeArgv] = plainNode(EGRESS_CLI, args);
  // Under an open-file limit of its own (prlimit), when one is given.
  const [file, argv] = nofile === undefined ? [node, nodeArgv] : ['prlimit', [`--nofile=${nofile}:${nofile}`, '--', node, ...nodeArgv]];
  return new Promise((resolve) => {
    execFile(file, argv, { encoding: 'utf8', env: { ...EGRESS_BASE_ENV, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null;
      resolve({ status: code, stdout, stderr });
    });
  });
}
