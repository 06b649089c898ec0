/**
 * Results nobody inside the sandbox can forge, on the real engine through the real socket proxy.
 * A process an earlier command left behind runs the red team's recipe (forger.py): it stops every
 * kill script and writes its OK line, and stops the next command's wrapper, writes the start byte
 * and forged output into it and makes it exit 0 through ptrace.
 * - With commandIsolation `landlock` (the default) none of that reaches another command: each
 *   command is in a Landlock domain of its own, and the controller's scripts are in none.
 * - `fresh` ends the leftover whatever it does to the kill script, because root judges the kill.
 * - With isolation off, the same leftover forges a later command's result (what the opt-out
 *   gives up, as docs/controller.md says), and `fresh` still ends it.
 * Also: a thread group whose leader is a zombie is killed, a locale the image lacks does not turn
 * a command that ran into a failure, and a fork bomb is recovered from in bounded time.
 */
import t from 'tap';
import type { Test } from 'tap';
import { readFileSync } from 'node:fs';
import pino from 'pino';
import { rejectsCode, untilInSandbox } from '../../support/sandbox-asserts.js';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { createDockerSandbox, isSandboxError, type ExecResult, type SandboxHandle, type SandboxProvider } from '../../../controller/index.js';
import { MAX_COMMAND_SCRIPT_BYTES, parseSurvivors, survivorsCmd } from '../../../controller/exec/exec-script.js';
import { execFileSync } from 'node:child_process';
import { fileNeeds } from '../../support/needs.js';
import { captureLogs } from '../../support/log-capture.js';

await fileNeeds(t, 'engine');

const FORGER = readFileSync(new URL('./forger.py', import.meta.url), 'utf8');
/** On the workspace volume, which a restart keeps. */
const FORGER_LOG = '/workspace/forger.log';
/** Two forgers, so that one of them wins the race to a new process more often. */
const LEAVE_FORGERS = `rm -f ${FORGER_LOG}*; for i in 1 2; do setsid nohup python3 /workspace/forger.py ${FORGER_LOG} >/dev/null 2>&1 < /dev/null & done`;
const VICTIM = 'sleep 1; echo real-result; exit 1';
/**
 * The forgers spin on /proc, and a fork bomb keeps every core it may use busy: capped, so that
 * the suite's timing tests running beside them keep a core.
 */
const FORGER_LIMITS = { egress: 'none' as const, cpu: 1 };

/**
 * Leaves the forgers running. From then on every command is theirs to attack, so the wait (and
 * every look at their log) reads a file, which no forger touches.
 */
async function leaveForgers(t: Test, provider: SandboxProvider, h: SandboxHandle): Promise<void> {
  await provider.writeFile(h, '/workspace/forger.py', FORGER);
  t.equal((await provider.exec(h, LEAVE_FORGERS)).exitCode, 0, 'the earlier command returns at once, leaving its processes');
  const deadline = Date.now() + 30_000;
  while ((await forgerLog(provider, h).catch(() => [])).filter((l) => l.startsWith('watching')).length < 2) {
    if (Date.now() > deadline) throw new Error('the forgers did not start within 30 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function forgerLog(provider: SandboxProvider, h: SandboxHandle): Promise<string[]> {
  return Buffer.from(await provider.readFile(h, FORGER_LOG)).toString().split('\n').filter((l) => l !== '');
}

/**
 * Leaves forgers and runs a command with `fresh`, up to 5 times, until a forger won the race to
 * the kill script (which it stops before its first kill): then root's check finds the forgers
 * alive and the container restarts before the command. Whoever wins, the result is the command's
 * own and the forgers are gone. With `forgedLine`, a forger that won also wrote the kill script's
 * OK line (isolation off), which the controller did not believe.
 */
async function freshAgainstForgers(t: Test, provider: SandboxProvider, h: SandboxHandle, logs: Record<string, unknown>[], forgedLine = false): Promise<void> {
  for (let attempt = 1; attempt <= 5; attempt++) {
    await leaveForgers(t, provider, h);
    const logged = logs.length;
    const r = await provider.exec(h, VICTIM, { fresh: true });
    t.same([r.exitCode, r.stdout, r.stderr], [1, 'real-result\n', ''], `try ${attempt}: the command's own result`);
    t.equal((await provider.exec(h, 'pgrep -c -u 1000 python3 || true')).stdout, '0\n', 'the forgers are gone');
    const log = await forgerLog(provider, h);
    const restarts = logs.slice(logged).filter((e) => e.event === 'container_restart');
    if (!log.some((l) => l.startsWith('stopped capybara-kill'))) {
      // A forger that stopped the kill script logs it after the stop: root may restart the
      // container first, and the line is lost with the forger (CI saw it once); a kill slow to
      // confirm on a loaded machine restarts too. Either way the restart must say why, and
      // nothing may have survived it.
      if (r.restarted === true) {
        t.match(restarts, [{ cause: 'kill_not_confirmed', survivors: [] }], `try ${attempt}: the kill was not confirmed (a forger stopped it and its line was lost in the restart, or the kill was slow): restarted, nothing survived, and the result says so`);
        return;
      }
      t.same([r.restarted, restarts], [undefined, []], `try ${attempt}: the kill script won the race and ended the forgers; no restart`);
      continue;
    }
    t.equal(r.restarted, true, 'a forger stopped the kill script: root found it alive, the container restarted, and the result says so');
    t.match(restarts, [{ cause: /^(survivors_after_kill|kill_not_confirmed)$/ }]);
    t.equal(log.includes('kill-ok-line ok'), forgedLine, forgedLine ? 'the OK line the forger wrote was not believed' : 'the forger could not write the OK line');
    return;
  }
  t.comment('in 5 tries the kill script always ended the forgers before they could stop it; the fake engine covers the restart (exec-fresh.test.ts)');
}

/** The result, or the error's code and message. */
async function outcome(p: Promise<ExecResult>): Promise<ExecResult | { error: string; message: string }> {
  return p.then((r) => r, (err: unknown) => ({ error: isSandboxError(err) ? err.code : 'other', message: String(err) }));
}

t.test('commands of one sandbox cannot forge each other\'s results', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env } = s;

  await t.test('landlock: a leftover can neither write into, trace, nor read the memory of a later command', async (t) => {
    const h = await provider.create({ id: `${env.runId}-ll`, image: SANDBOX_IMAGE, limits: FORGER_LIMITS });
    t.teardown(() => provider.destroy(h));
    await leaveForgers(t, provider, h);
    // The race to the wrapper: a forger that first sees it after its exec into setpriv leaves it.
    let log: string[] = [];
    for (let i = 1; i <= 5 && !log.includes('stopped capybara-exec'); i++) {
      const r = await outcome(provider.exec(h, VICTIM));
      t.comment(`try ${i}: ${JSON.stringify(r)}`);
      t.notMatch(JSON.stringify(r), /FORGED/, 'nothing the leftover wrote is in the result');
      t.ok('error' in r ? r.error === 'exec_failed' : r.exitCode === 1 || r.exitCode === 137, 'the command\'s own result, or a failed start or a kill: all the leftover could do');
      log = await forgerLog(provider, h);
    }
    t.ok(log.includes('stopped capybara-exec'), 'the leftover got to a wrapper');
    for (const what of ['start-byte', 'forged-stdout', 'mem']) t.ok(log.includes(`${what} 13`), `${what}: EACCES`);
    t.ok(log.includes('ptrace-exit-0 1'), 'ptrace: EPERM');
    t.notOk(log.some((l) => l.endsWith(' ok')), 'no attempt succeeded');
    // Within one command, a debugger still works: strace's ptrace of its own child.
    const traced = await provider.exec(h, 'python3 -c "import ctypes, os, signal\npid = os.fork()\nif pid == 0:\n    signal.pause()\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.ptrace(16, pid, None, None), ctypes.get_errno())\nos.kill(pid, 9)"', { fresh: true });
    t.equal(traced.stdout, '0 0\n', 'a command may trace its own processes');
  });

  await t.test('fresh ends the leftover whatever it does to the kill script: root judges the kill', async (t) => {
    const h = await provider.create({ id: `${env.runId}-fr`, image: SANDBOX_IMAGE, limits: FORGER_LIMITS });
    t.teardown(() => provider.destroy(h));
    await freshAgainstForgers(t, provider, h, s.logs);
  });

  await t.test('isolation off: the leftover forges a later command\'s result, and fresh still ends it', async (t) => {
    const { logs, sink } = captureLogs();
    const shared = createDockerSandbox({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, commandIsolation: 'off' }, { labels: env.labels }, { logger: pino({ level: 'warn' }, sink) });
    const h = await shared.create({ id: `${env.runId}-off`, image: SANDBOX_IMAGE, limits: FORGER_LIMITS });
    t.teardown(() => shared.destroy(h));
    await leaveForgers(t, shared, h);
    // The race to the wrapper: a forger that sees it after it wrote its start byte only kills it.
    let forged: ExecResult | undefined;
    for (let i = 0; i < 5 && forged === undefined; i++) {
      const r = await outcome(shared.exec(h, VICTIM));
      t.comment(`try ${i + 1}: ${JSON.stringify(r)}`);
      if ('exitCode' in r && r.stdout.includes('FORGED')) forged = r;
    }
    // The wrapper's own subshell is forged too (its own start bytes in stderr, and so on).
    t.match(forged, { exitCode: 0, stdout: /^(FORGED RESULT\n)+$/ }, 'exit 0 and the forged output: the command never ran');
    // Ended before the next forgers come: two sets at once would fight over each process.
    await shared.killAll(h);
    await freshAgainstForgers(t, shared, h, logs, true);
  });

  await t.test('a thread group whose leader is a zombie is alive, and every kill ends it', async (t) => {
    const h = await provider.create({ id: `${env.runId}-zl`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
    t.teardown(() => provider.destroy(h));
    // The main thread exits (pthread_exit); another thread appends to a file every 50 ms.
    const beat = (file: string) => `python3 -c "import ctypes, threading, time
def beat():
    while True:
        open('${file}', 'a').write('.')
        time.sleep(0.05)
threading.Thread(target=beat).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)"`;
    const grows = async (file: string): Promise<boolean> => {
      const size = async () => Number((await provider.exec(h, `stat -c %s ${file} 2>/dev/null || echo 0`)).stdout);
      const a = await size();
      await new Promise((r) => setTimeout(r, 1000));
      return (await size()) > a;
    };
    const timed = await provider.exec(h, `${beat('/tmp/t')}; sleep 60`, { timeoutMs: 1500, tag: 'zt' });
    t.equal(timed.timedOut, true);
    t.equal(await grows('/tmp/t'), false, 'a timeout ends it');
    await provider.exec(h, `${beat('/tmp/k')} & sleep 0.5; echo started`, { tag: 'zk' });
    await untilInSandbox(provider, h, `for p in $(pgrep -x python3); do cat /proc/$p/stat; done | grep -q ') Z '`);
    t.equal(await grows('/tmp/k'), true, 'the zombie-led process runs on after its command');
    await provider.killTagged(h, ['zk']);
    t.equal(await grows('/tmp/k'), false, 'killTagged ends it');
    await provider.exec(h, `${beat('/tmp/a')} & sleep 0.5; sleep 600 & kill -STOP $!`);
    t.equal(await grows('/tmp/a'), true);
    const survivors = () => execFileSync('docker', ['exec', '-u', '0', h.id, ...survivorsCmd()], { encoding: 'utf8' });
    const before = parseSurvivors(survivors());
    // Every process of the sandbox user: pgrep (a process of its own, not bash's child) leaves itself out.
    const expected = execFileSync('docker', ['exec', '-u', '1000', h.id, 'pgrep', '-u', '1000'], { encoding: 'utf8' }).trim().split('\n').map(Number);
    t.same(before?.sort(), expected.sort(), 'root\'s check lists the zombie-led process and a stopped one');
    await provider.killAll(h);
    t.same(parseSurvivors(survivors()), [], 'and nothing after killAll');
    t.equal(await grows('/tmp/a'), false, 'killAll ends it');
  });

  await t.test('a locale the image lacks: the command runs once and its result is its own', async (t) => {
    const h = await provider.create({ id: `${env.runId}-lc`, image: SANDBOX_IMAGE, limits: { egress: 'none' }, env: { LC_ALL: 'en_US.UTF-8' } });
    t.teardown(() => provider.destroy(h));
    const r = await provider.exec(h, 'echo ran >> /workspace/count; echo out; exit 3');
    t.same([r.exitCode, r.stdout], [3, 'out\n']);
    t.notMatch(r.stderr, /capybara/, 'nothing of the controller\'s in it');
    t.equal((await provider.exec(h, 'cat /workspace/count')).stdout, 'ran\n', 'it ran once');
  });

  await t.test('a command longer than one argument may be: refused with the limit; the longest runs', async (t) => {
    const h = await provider.create({ id: `${env.runId}-argv`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
    t.teardown(() => provider.destroy(h));
    const longest = `: ${'x'.repeat(MAX_COMMAND_SCRIPT_BYTES - 12)}; echo ran`;
    t.equal(Buffer.byteLength(longest), MAX_COMMAND_SCRIPT_BYTES);
    t.same([(await provider.exec(h, longest)).stdout], ['ran\n']);
    await rejectsCode(t, provider.exec(h, `${longest} `), 'invalid_spec', /limit is 131071/);
  });

  await t.test('after a fork bomb, the next command runs or is sandbox_full within its timeout plus 10 s', async (t) => {
    const h = await provider.create({ id: `${env.runId}-fb`, image: SANDBOX_IMAGE, limits: { egress: 'none', cpu: 0.5 } });
    t.teardown(() => provider.destroy(h));
    for (let round = 1; round <= 3; round++) {
      const logged = s.logs.length;
      const bomb = await outcome(provider.exec(h, 'b() { b | b & }; b; sleep 5', { timeoutMs: 3000 }));
      t.notMatch(JSON.stringify(bomb), /capybara/, `round ${round}: the bomb's result holds none of the controller's markers`);
      const started = Date.now();
      const next = await outcome(provider.exec(h, 'echo next', { timeoutMs: 5000 }));
      const took = Date.now() - started;
      t.comment(`round ${round}: bomb ${JSON.stringify(bomb).slice(0, 200)}; next after ${took} ms: ${JSON.stringify(next).slice(0, 300)}`);
      t.ok(took < 15_000, `round ${round}: the next command answered in ${took} ms`);
      t.ok('error' in next ? next.error === 'sandbox_full' : next.stdout === 'next\n' && next.exitCode === 0, `round ${round}: it ran, or sandbox_full`);
      t.notMatch(JSON.stringify(next), /capybara-sandbox-full|capybara-exec|capybara-kill/, 'no marker of the controller\'s');
      const restarts = s.logs.slice(logged).filter((e) => e.event === 'container_restart').length;
      t.ok(restarts <= 2, `round ${round}: ${restarts} restarts, not a loop`);
      await provider.killAll(h);
    }
    t.equal((await provider.exec(h, 'echo calm')).stdout, 'calm\n');
  });
});
