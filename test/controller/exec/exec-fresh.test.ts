/**
 * exec's `fresh` on the in-memory engine: every process of the sandbox user is ended (killAll's
 * script, judged by a root check of what still runs) before the command's exec is created, and
 * when anything survives or the check cannot run, the container restarts before the command runs,
 * and the result says so. What the kill script itself prints is never the judge. The attack it stops runs on the real engine in
 * docker-exec-truth.test.ts. And what a command whose exec could not start is: `conflict` when
 * another call stopped or removed the sandbox meanwhile, else `exec_failed`.
 */
import t from 'tap';
import type { Test } from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';
import { KILL_OK_MARKER, STARTED_BYTE, SURVIVORS_MARKER } from '../../../controller/exec/exec-script.js';
import type { ExecRequest } from '../../../controller/docker/engine.js';

const kind = (r: ExecRequest): string =>
  r.cmd[3] === 'capybara-killall' ? 'killall' : r.cmd[3] === 'capybara-exec' ? 'command' : r.cmd[3] === SURVIVORS_MARKER ? `survivors as ${r.user}` : String(r.cmd[3]);
const START = String.fromCharCode(STARTED_BYTE);

t.test('fresh ends everything first, then runs the command', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'fresh', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  const seen: string[] = [];
  s.engine.onExec = (_container, request) => {
    seen.push(kind(request));
    if (kind(request) === 'killall') return { exitCode: 0, stdout: `${KILL_OK_MARKER}\n` };
    if (request.cmd[3] === SURVIVORS_MARKER) return { exitCode: 0, stdout: `${SURVIVORS_MARKER} 0\n` };
    return { exitCode: 3, stderr: `${START}own\n` };
  };
  t.same(await s.provider.exec(h, 'true', { fresh: true }), { exitCode: 3, stdout: '', stderr: 'own\n', truncated: false, timedOut: false, aborted: false });
  t.same(seen, ['killall', 'survivors as 0:0', 'command'], 'the kill, then root\'s look at what survived it');
  seen.length = 0;
  await s.provider.exec(h, 'true');
  t.same(seen, ['command'], 'without fresh, nothing is killed');
});

/** A sandbox whose kill script answers `kill` and whose root checks answer `looks` in turn. */
async function freshCase(t: Test, kill: { exitCode: number; stdout?: string }, looks: Array<{ exitCode: number; stdout?: string }>) {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: `fresh-${looks.length}-${kill.exitCode}`, image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  const order: string[] = [];
  s.engine.beforeCall((call) => {
    if (call.method === 'restartContainer') order.push('restart');
  });
  let look = 0;
  s.engine.onExec = (_container, request) => {
    order.push(kind(request));
    if (kind(request) === 'killall') return kill;
    if (request.cmd[3] === SURVIVORS_MARKER) return looks[Math.min(look++, looks.length - 1)] ?? { exitCode: 1 };
    return { exitCode: 0, stderr: `${START}ran\n` };
  };
  const result = await s.provider.exec(h, 'true', { fresh: true });
  t.teardown(() => s.provider.destroy(h));
  return { result, order, logs: s.logs };
}

t.test('a survivor after a kill that claimed success restarts the container before the command, and the result says so', async (t) => {
  const survivor = { exitCode: 0, stdout: `${SURVIVORS_MARKER} 1 812\n` };
  const { result, order, logs } = await freshCase(t, { exitCode: 0, stdout: `${KILL_OK_MARKER}\n` }, [survivor]);
  t.same(order, ['killall', 'survivors as 0:0', 'survivors as 0:0', 'survivors as 0:0', 'restart', 'command'], 'three looks a moment apart, then the restart');
  t.same(result, { exitCode: 0, stdout: '', stderr: 'ran\n', truncated: false, timedOut: false, aborted: false, restarted: true });
  t.match(logs, [{ event: 'container_restart', cause: 'survivors_after_kill', survivors: [812] }]);
});

t.test('a process still dying at the first look is not a survivor', async (t) => {
  const { result, order } = await freshCase(t, { exitCode: 0, stdout: `${KILL_OK_MARKER}\n` }, [{ exitCode: 0, stdout: `${SURVIVORS_MARKER} 1 812\n` }, { exitCode: 0, stdout: `${SURVIVORS_MARKER} 0\n` }]);
  t.same(order, ['killall', 'survivors as 0:0', 'survivors as 0:0', 'command']);
  t.equal(result.restarted, undefined);
});

t.test('a root check that cannot run, or answers anything but its line, restarts the container', async (t) => {
  for (const answer of [
    { exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: read init-p: connection reset by peer: unknown\r\n' },
    { exitCode: 0, stdout: `${SURVIVORS_MARKER} 2 812\n` },
    { exitCode: 0, stdout: `${SURVIVORS_MARKER} 0\n${SURVIVORS_MARKER} 0\n` },
  ]) {
    const { result, order, logs } = await freshCase(t, { exitCode: 0, stdout: `${KILL_OK_MARKER}\n` }, [answer]);
    t.same(order, ['killall', 'survivors as 0:0', 'restart', 'command'], JSON.stringify(answer.stdout));
    t.equal(result.restarted, true);
    t.match(logs, [{ event: 'container_restart', cause: 'survivor_check_failed' }]);
  }
});

t.test('a kill script that never said OK (killed or stopped by a process it was to kill) restarts the container, whatever the root check says', async (t) => {
  const { result, order, logs } = await freshCase(t, { exitCode: 137 }, [{ exitCode: 0, stdout: `${SURVIVORS_MARKER} 0\n` }]);
  t.same(order, ['killall', 'survivors as 0:0', 'restart', 'command'], 'the check judges; it does not excuse an unfinished kill');
  t.equal(result.restarted, true);
  t.match(logs, [{ event: 'container_restart', cause: 'kill_not_confirmed' }]);
});

t.test('a command whose exec cannot start because another call stopped the sandbox meanwhile: conflict, not exec_failed', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'gone', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  const runtime = 'OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown\r\n';
  s.engine.onExec = () => {
    // Another controller's destroy: the container is gone by the time the exec reports.
    s.engine.containers.delete(h.id);
    return { exitCode: 126, stdout: runtime };
  };
  const err = await s.provider.exec(h, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'conflict'), String(err));
  t.match((err as Error).message, /cannot exec in a stopped container/);
});

t.test('a command whose exec cannot start in a sandbox that still runs: exec_failed', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'runs', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  s.engine.onExec = () => ({ exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: exec: "bash": not found\r\n' });
  const err = await s.provider.exec(h, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'exec_failed'), String(err));
});

t.test('a command whose exec cannot start, and an engine that cannot say whether the sandbox still runs: exec_failed', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'unsure', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  s.engine.onExec = () => {
    s.engine.failOnce('inspectContainer', h.id, 500, 'engine busy');
    return { exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: exec: "bash": not found\r\n' };
  };
  const err = await s.provider.exec(h, 'true').catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'exec_failed'), String(err));
});
