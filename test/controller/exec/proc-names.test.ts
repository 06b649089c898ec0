/**
 * The controller's kill and survivor scripts (controller/exec/exec-script.ts) run for real with
 * bash on this machine's /proc, against processes of the test's own whose names lie. A process
 * may set its own name (and each thread its own) to anything of 15 bytes, a newline and ") Z"
 * included, and /proc/PID/stat prints it raw: read a line at a time, "a) Z" and a newline spells
 * a zombie. A kill script that read so passed over a live marked process and still said OK; root's
 * survivor check passed over a process whose live thread was so named, and `fresh` went ahead
 * with an earlier command still running (review finding). Only processes this test starts are
 * touched: the kill script chooses by a mark unique to the run, and the survivor check only lists.
 */
import t from 'tap';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { EXEC_MARK_VAR, KILL_OK_MARKER, killTaggedCmd, parseSurvivors, survivorsCmd } from '../../../controller/exec/exec-script.js';
import { needUnmet } from '../../support/needs.js';
import { settle } from '../../support/settle.js';

const LYING_NAME = 'a) Z\n';

function ready(child: ChildProcess): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.stdout?.once('data', () => resolve(child));
  });
}

/** The state /proc/PID/status gives (its Name line is escaped, so this one does not lie). */
function state(pid: number): string | undefined {
  return spawnSync('cat', [`/proc/${pid}/status`]).stdout.toString().match(/^State:\s+(\S)/m)?.[1];
}

const alive = (pid: number): boolean => {
  const s = state(pid);
  return s !== undefined && s !== 'Z' && s !== 'X';
};

function run(cmd: readonly string[]): string {
  const [file, ...args] = cmd;
  return spawnSync(file ?? 'bash', args, { encoding: 'utf8', timeout: 60_000 }).stdout;
}

t.test('a kill by tag ends a marked process whatever name it gave itself', async (t) => {
  const tag = `names${randomBytes(4).toString('hex')}`;
  for (const name of [undefined, LYING_NAME, ') R (x']) {
    // printf's format reads the \n as a newline.
    const rename = name === undefined ? ':' : `printf '${name.replace('\n', '\\n')}' > /proc/$$/comm`;
    // It waits with builtins only, so no child of its own could be found in its place.
    const child = await ready(
      spawn('bash', ['-c', `${rename}\nexec 4<> <(:)\necho ready\nwhile :; do read -r -t 1 -u 4; done`], {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', [EXEC_MARK_VAR]: `${tag}/${randomUUID()}` },
        stdio: ['ignore', 'pipe', 'inherit'],
      }),
    );
    const pid = child.pid ?? 0;
    t.teardown(() => void child.kill('SIGKILL'));
    const label = name === undefined ? 'its own name' : JSON.stringify(name);
    t.match(run(killTaggedCmd([tag])), KILL_OK_MARKER, `${label}: the script says nothing marked is alive`);
    const deadline = Date.now() + 5_000;
    while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    t.notOk(alive(pid), `${label}: and it is so`);
  }
});

t.test('root\'s survivor check lists a process whose main thread ended and whose live thread gave itself any name', async (t) => {
  if (process.getuid?.() !== 0) return needUnmet(t, 'root, to start a process of another user');
  for (const name of [undefined, LYING_NAME]) {
    const rename = name === undefined ? 'pass' : `ctypes.CDLL(None).prctl(15, ${JSON.stringify(name)}.encode(), 0, 0, 0)`;
    // The main thread exits (pthread_exit): the leader reads as a zombie, the other thread runs on.
    const code = [
      'import ctypes, sys, threading, time',
      'def run():',
      `    ${rename}`,
      "    sys.stdout.write('ready\\n'); sys.stdout.flush()",
      '    while True: time.sleep(0.05)',
      'threading.Thread(target=run).start()',
      'time.sleep(0.3)',
      'ctypes.CDLL(None).pthread_exit(None)',
    ].join('\n');
    const child = await ready(spawn('python3', ['-c', code], { uid: 65534, gid: 65534, stdio: ['ignore', 'pipe', 'inherit'] }));
    const pid = child.pid ?? 0;
    t.teardown(() => void child.kill('SIGKILL'));
    const label = name === undefined ? 'its own name' : JSON.stringify(name);
    // The leader ends 0.3 s after the thread starts, later on a loaded machine: judged once it has
    // (a fixed wait after "ready" could look before its pthread_exit).
    await settle(() => state(pid) === 'Z' || child.exitCode !== null, `${label}: the leader's pthread_exit`, 15_000);
    t.equal(state(pid), 'Z', `${label}: its leader reads as a zombie`);
    t.equal(child.exitCode, null, `${label}: the process runs on`);
    t.ok(parseSurvivors(run(survivorsCmd()))?.includes(pid), `${label}: root's check lists it`);
  }
});
