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
