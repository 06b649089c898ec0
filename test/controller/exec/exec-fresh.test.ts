/**
 * exec's `fresh` on the in-memory engine: every process of the sandbox user is ended (killAll's
 * script, confirmed) before the command's exec is created, and when that kill cannot confirm, the
 * container restarts before the command runs. The attack it stops runs on the real engine in
 * docker-exec-truth.test.ts. And what a command whose exec could not start is: `conflict` when
 * another call stopped or removed the sandbox meanwhile, else `exec_failed`.
 */
import t from 'tap';
import { isSandboxError } from '../../../controller/index.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';
import { KILL_OK_MARKER, STARTED_BYTE } from '../../../controller/exec/exec-script.js';
import type { ExecRequest } from '../../../controller/docker/engine.js';

const kind = (r: ExecRequest): string => (r.cmd[3] === 'capybara-killall' ? 'killall' : r.cmd[3] === 'capybara-exec' ? 'command' : String(r.cmd[3]));

t.test('fresh ends everything first, then runs the command', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'fresh', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  const seen: string[] = [];
  s.engine.onExec = (_container, request) => {
    seen.push(kind(request));
    return kind(request) === 'killall' ? { exitCode: 0, stdout: `${KILL_OK_MARKER}\n` } : { exitCode: 3, stderr: `${String.fromCharCode(STARTED_BYTE)}own\n` };
  };
  t.same(await s.provider.exec(h, 'true', { fresh: true }), { exitCode: 3, stdout: '', stderr: 'own\n', truncated: false, timedOut: false, aborted: false });
  t.same(seen, ['killall', 'command']);
  seen.length = 0;
  await s.provider.exec(h, 'true');
  t.same(seen, ['command'], 'without fresh, nothing is killed');
});

t.test('a kill that does not confirm restarts the container before the command', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'fresh2', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  const order: string[] = [];
  s.engine.beforeCall((call) => {
    if (call.method === 'restartContainer') order.push('restart');
  });
  s.engine.onExec = (_container, request) => {
    order.push(kind(request));
    // A process survived every round: no OK line.
    return kind(request) === 'killall' ? { exitCode: 0 } : { exitCode: 0, stderr: String.fromCharCode(STARTED_BYTE) };
  };
  t.equal((await s.provider.exec(h, 'true', { fresh: true })).exitCode, 0);
  t.same(order, ['killall', 'restart', 'command']);
  t.match(s.logs, [{ event: 'container_restart', cause: 'kill_not_confirmed' }]);
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
