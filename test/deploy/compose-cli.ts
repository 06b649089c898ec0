/**
 * Runs Debian's docker-compose (1.29, installed by .ci/run) for the deploy/ tests, under the one
 * rule of test/support/needs.ts: outside CI a missing docker-compose skips with the reason, under
 * CI it fails. Every project is brought down (volumes too) at teardown.
 */
import { execFile, execFileSync } from 'node:child_process';
import type { Test } from 'tap';
import { needUnmet } from '../support/needs.js';

export interface Ran {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface ComposeProject {
  readonly name: string;
  run(args: readonly string[], env?: Record<string, string>): Promise<Ran>;
  /** `exec -T SERVICE bash -c COMMAND`: as the service's own user, no TTY. */
  /** Runs `command` with bash in a service's container, as its user or as `user`. */
  exec(service: string, command: string, user?: string): Promise<Ran>;
  /** The container id of a service. */
  id(service: string): Promise<string>;
}

export function runCommand(file: string, args: readonly string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(file, [...args], { cwd: options.cwd, env: options.env ?? process.env, timeout: options.timeoutMs ?? 180_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr });
    });
  });
}

function composeMissing(): string | undefined {
  try {
    execFileSync('docker-compose', ['version', '--short'], { stdio: 'pipe' });
    return undefined;
  } catch (err) {
    return `docker-compose is not installed (${(err as Error).message.split('\n')[0]}); apt-get install docker-compose (.ci/run does)`;
  }
}

/** null: skipped (outside CI) or failed (under CI) because docker-compose is missing. */
export function composeProject(t: Test, name: string, files: readonly string[], baseEnv: Record<string, string> = {}): ComposeProject | null {
  const missing = composeMissing();
  if (missing !== undefined) {
    needUnmet(t, missing);
    return null;
  }
  const fileArgs = files.flatMap((f) => ['-f', f]);
  const run = (args: readonly string[], env: Record<string, string> = {}): Promise<Ran> =>
    runCommand('docker-compose', ['-p', name, ...fileArgs, ...args], { env: { ...process.env, ...baseEnv, ...env } });
  t.teardown(async () => {
    await run(['down', '-v', '--remove-orphans', '--timeout', '2']);
  });
  return {
    name,
    run,
    exec: (service, command, user) => run(['exec', '-T', ...(user === undefined ? [] : ['-u', user]), service, 'bash', '-c', command]),
    id: async (service) => (await run(['ps', '-q', service])).stdout.trim(),
  };
}
