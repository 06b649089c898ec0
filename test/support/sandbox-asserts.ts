/** Assertions and waits of the tests that drive a SandboxProvider (on the real engine or the fake). */
import type { Test } from 'tap';
import { isSandboxError, type SandboxHandle, type SandboxProvider } from '../../controller/index.js';

/** Asserts that `promise` rejects with a SandboxError of `code` (whose message matches `mentions`). */
export async function rejectsCode(t: Test, promise: Promise<unknown>, code: string, mentions?: string | RegExp): Promise<void> {
  try {
    await promise;
    t.fail(`expected ${code}`);
  } catch (err) {
    t.ok(isSandboxError(err), `a SandboxError: ${String(err)}`);
    t.equal((err as { code?: string }).code, code, (err as Error).message);
    if (mentions !== undefined) t.match((err as Error).message, mentions);
  }
}

/**
 * A readiness signal: polls `check` inside the sandbox until it exits 0 (a process has started,
 * a file exists), within a deadline with room for a loaded 2-core machine.
 */
export async function untilInSandbox(provider: SandboxProvider, h: SandboxHandle, check: string, deadlineMs = 30_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while ((await provider.exec(h, check, { timeoutMs: 10_000 })).exitCode !== 0) {
    if (Date.now() > deadline) throw new Error(`not ready within ${deadlineMs} ms: ${check}`);
  }
}

/**
 * `docker stop` and `docker pause` of sandbox `h` behind the controller's back, each undone by its
 * next call (concurrent calls share one recovery); it holds a file `/workspace/kept` with `kept`.
 */
export async function autoStarts(t: Test, provider: SandboxProvider, h: SandboxHandle, docker: (...args: string[]) => string): Promise<void> {
  docker('stop', '-t', '0', h.id);
  const both = await Promise.all([provider.exec(h, 'echo back'), provider.stat(h, '/workspace/kept')]);
  t.equal(both[0].stdout, 'back\n', 'concurrent auto-starts share one recovery');
  t.match(both[1], { type: 'file' });
  docker('pause', h.id);
  t.equal((await provider.exec(h, 'echo unpaused')).stdout, 'unpaused\n');
  docker('pause', h.id);
  t.equal(Buffer.from(await provider.readFile(h, '/workspace/kept')).toString(), 'kept\n');
  docker('stop', '-t', '0', h.id);
  await provider.killAll(h);
  t.equal(docker('inspect', '-f', '{{.State.Running}}', h.id), 'true');
}
