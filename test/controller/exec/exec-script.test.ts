import t from 'tap';
import { spawnSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  EXEC_MARK_VAR,
  KILL_OK_MARKER,
  MAX_INLINE_PAYLOAD,
  STARTED_BYTE,
  WRAPPER_FAILED_EXIT,
  WRAPPER_FAILED_MARKER,
  commandPayload,
  encodeArg,
  execMark,
  killMarkedCmd,
  killTaggedCmd,
  readFileCmd,
  shellQuote,
  stagedPayload,
  statCmd,
  wrapperCmd,
  writeFileCmd,
  FILE_EXIT,
} from '../../../controller/exec/exec-script.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import { leftOutOfUnitRun, needUnmet, toolMissing } from '../../support/needs.js';
import { liveWithEnv } from '../../support/processes.js';

// These run the scripts with the host's bash and coreutils (no Docker): the same programs the
// sandbox image ships. The kill scripts read every process's environment on this machine, and
// kill only what carries a mark of this file's own: each test's tag is unique (other worktrees
// may run this file at the same time).
const START = String.fromCharCode(STARTED_BYTE);
const uniqueTag = (name: string) => `${name}-${randomUUID().slice(0, 8)}`;

/** The environment Docker gives a command's exec: the caller's plus the mark. */
function markedEnv(mark: string): NodeJS.ProcessEnv {
  return { ...process.env, [EXEC_MARK_VAR]: mark };
}

/**
 * Runs a script to its end. The timeout only guards against a hang: a kill script scans the whole
 * host's /proc, every process's environment, which on a loaded CI machine running engine tests
 * beside it takes seconds a round; the tests judge what a script printed and left alive, never
 * how fast (a timeout's SIGKILL would also pass for the backstop's).
 */
function run(cmd: string[], input?: Buffer | string, env?: NodeJS.ProcessEnv) {
  const [file, ...args] = cmd;
  return spawnSync(file ?? 'bash', args, { input: typeof input === 'string' ? Buffer.from(input) : input, encoding: 'buffer', timeout: 120_000, env });
}

/** Live processes carrying a mark. */
function liveMarked(mark: string): number[] {
  return liveWithEnv(`${EXEC_MARK_VAR}=${mark}`);
}

/** Clock ticks per second, the unit of a process's start time in /proc/PID/stat. */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** Now, in clock ticks since boot: the clock of a process's start time. */
function ticksSinceBoot(): number {
  return Math.ceil(Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]) * CLOCK_TICKS);
}

/**
 * Live processes of a session, started by `bornBy` (clock ticks since boot). A killed process
 * stays a zombie until its parent, or PID 1 for an orphan, reaps it, and a PID 1 may reap slowly
 * or never (tini does in the sandbox; a test machine's may not), so zombies (state Z) do not
 * count as left over. Pids wrap (32,768 of them on a CI machine that runs thousands of
 * processes): once the session's leader is gone, its number can lead a new session of someone
 * else's, whose processes start after the kill (a fresh-clone CI run saw one), so those do not
 * count either.
 */
function liveInSession(sid: number, bornBy = Infinity): number[] {
  const live: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    // Fields after "(comm) ": state ppid pgrp session ..., the start time 20th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const [state, , , session] = fields;
    if (session === String(sid) && state !== 'Z' && Number(fields[19]) <= bornBy) live.push(Number(entry));
  }
  return live;
}

/** Polls until `left()` is empty (returning it) or the deadline passes (returning what is left). */
async function gone(left: () => number[], deadlineMs = 10_000): Promise<number[]> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const now = left();
    if (now.length === 0 || Date.now() > deadline) return now;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits until `ready()` holds; false at the deadline. */
async function until(ready: () => boolean, deadlineMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + deadlineMs;
  while (!ready()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

t.test('every exec argument is ASCII without JSON escapes', async (t) => {
  const cmd = wrapperCmd(65, encodeArg(commandPayload('echo "héllo\tworld" \u0001', { V: 'ü\nx' }, '/tmp/ä')), 'off');
  const json = JSON.stringify(cmd);
  t.notMatch(json, /\\u/);
  t.match(json, /^[\x20-\x7e]*$/);
});

t.test('shellQuote round-trips awkward strings', async (t) => {
  for (const value of ["it's", '$(rm -rf /)', 'a\nb', '`x`', '"', '\\', 'ü']) {
    const out = run(['bash', '-c', `printf %s ${shellQuote(value)}`]);
    t.equal(out.stdout.toString(), value, JSON.stringify(value));
  }
});

t.test('wrapper runs the command with env, cwd and stdin; the start byte comes first', async (t) => {
  const mark = execMark(uniqueTag('t1'), randomUUID());
  const payload = encodeArg(commandPayload('echo "$GREETING from $(pwd)"; cat; echo "mark=$' + EXEC_MARK_VAR + '" >&2; exit 3', { GREETING: "it's ü" }, '/tmp'));
  const out = run(wrapperCmd(30, payload, 'off'), 'stdin-data', markedEnv(mark));
  t.equal(out.status, 3);
  t.equal(out.stdout.toString(), "it's ü from /tmp\nstdin-data");
  t.equal(out.stderr.toString(), `${START}mark=${mark}\n`, 'the start byte, then the command\'s own stderr; the mark is in its environment');
});

t.test('a command with a syntax error has begun: its status is its own', async (t) => {
  const out = run(wrapperCmd(30, encodeArg(commandPayload('echo one\nif then', {}, undefined)), 'off'), undefined, markedEnv(execMark('t', randomUUID())));
  t.equal(out.status, 2);
  t.equal(out.stdout.toString(), 'one\n');
  t.ok(out.stderr.toString().startsWith(`${START}`), 'started');
});

t.test('a missing cwd is a clear error', async (t) => {
  const out = run(wrapperCmd(30, encodeArg(commandPayload('true', {}, '/nonexistent-dir')), 'off'), undefined, markedEnv(execMark('t', randomUUID())));
  t.equal(out.status, 126);
  t.match(out.stderr.toString(), 'cannot change directory to /nonexistent-dir');
});

t.test('backstop kills a command that outlives its limit', async (t) => {
  const started = Date.now();
  const out = run(wrapperCmd(1, encodeArg(commandPayload('sleep 30', {}, undefined)), 'off'), undefined, markedEnv(execMark('t', randomUUID())));
  // timeout kills its whole process group, itself included: Docker reports that exec as 137.
  t.equal(out.signal, 'SIGKILL');
  t.ok(Date.now() - started < 10_000);
});

t.test('a command too large for an exec body comes on stdin, ahead of the caller\'s', async (t) => {
  const mark = execMark(uniqueTag('big'), randomUUID());
  const big = `x=${'y'.repeat(MAX_INLINE_PAYLOAD)}\necho "\${#x}"; cat`;
  const staged = stagedPayload(commandPayload(big, {}, undefined), mark);
  const out = run(wrapperCmd(30, `-${staged.length}`, 'off'), Buffer.concat([staged, Buffer.from('caller stdin\n')]), markedEnv(mark));
  t.equal(out.status, 0, out.stderr.toString());
  t.equal(out.stdout.toString(), `${MAX_INLINE_PAYLOAD}\ncaller stdin\n`);
  // Cut short on the way (the connection broke): the part that came must not run as the whole.
  const dir = mkdtempSync(join(tmpdir(), 'capybara-cut-'));
  const sideEffect = join(dir, 'ran');
  const cut = stagedPayload(commandPayload(`touch ${sideEffect}; : ${'z'.repeat(MAX_INLINE_PAYLOAD)}`, {}, undefined), mark);
  const short = run(wrapperCmd(30, `-${cut.length}`, 'off'), cut.subarray(0, cut.length - 10), markedEnv(mark));
  t.equal(short.status, WRAPPER_FAILED_EXIT);
  t.equal(short.stderr.toString(), `${WRAPPER_FAILED_MARKER}: the command arrived incomplete on stdin\n`, 'no start byte: the wrapper failed, the command never began');
  t.notOk(existsSync(sideEffect), 'nothing of the command ran');
});

t.test('the wrapper writes nothing: a full /tmp cannot stop a command', async (t) => {
  // A mount namespace takes root, as the network namespaces of the 'netns' need do.
  if (leftOutOfUnitRun(t, 'netns')) return;
  const missing = toolMissing('unshare', ['--version'], 'util-linux');
  if (missing) return needUnmet(t, missing);
  if (spawnSync('unshare', ['-m', 'true']).status !== 0) return needUnmet(t, 'unshare -m cannot make a mount namespace here (root needed)');
  // A 64 KiB tmpfs on /tmp, filled up, in a mount namespace of its own; then the wrapper.
  const mark = execMark(uniqueTag('full'), randomUUID());
  const [, ...wrapperArgs] = wrapperCmd(30, encodeArg(commandPayload('echo still-runs; exit 7', {}, undefined)), 'off');
  const script = `mount -t tmpfs -o size=64k tmpfs /tmp && { head -c 1M /dev/zero > /tmp/fill; df -k /tmp | tail -1 >&2; exec bash "$@"; }`;
  const out = spawnSync('unshare', ['-m', '--propagation', 'private', 'bash', '-c', script, 'full', ...wrapperArgs], { encoding: 'buffer', timeout: 20_000, env: markedEnv(mark) });
  const stderr = out.stderr.toString();
  t.match(stderr, /\s100%\s/, '/tmp was full');
  t.equal(out.status, 7, stderr);
  t.equal(out.stdout.toString(), 'still-runs\n');
  t.ok(stderr.endsWith(START), 'the command began (the start byte after df\'s line)');
});

t.test('a kill by mark ends the command, its background children, and a child that left the session', async (t) => {
  const tag = uniqueTag('victim');
  const mark = execMark(tag, randomUUID());
  const done = `capybara-test-${randomUUID()}`;
  // Detached: a session of its own, as runc starts every exec. The env -i child stays in the
  // session without the mark; the setsid child leaves the session with the mark.
  const [file, ...args] = wrapperCmd(60, encodeArg(commandPayload(`sleep 300 & env -i /bin/sleep 302 & setsid sleep 303 & sleep 301; echo ${done}`, {}, undefined)), 'off');
  const child = spawn(file ?? 'bash', args, { stdio: 'ignore', detached: true, env: markedEnv(mark) });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const sid = child.pid ?? 0;
  t.ok(await until(() => liveInSession(sid).length >= 4 && liveMarked(mark).length >= 4), 'the command and its children run');
  const other = execMark(uniqueTag('other'), randomUUID());
  const bystander = spawn('sleep', ['304'], { stdio: 'ignore', env: markedEnv(other) });
  t.teardown(() => bystander.kill('SIGKILL'));
  const killed = run(killTaggedCmd([tag]));
  const killedBy = ticksSinceBoot();
  t.match(killed.stdout.toString(), KILL_OK_MARKER);
  t.equal(await exited, null, 'wrapper killed');
  t.same(await gone(() => liveInSession(sid, killedBy)), [], 'no live process left in the session, the unmarked one included');
  t.same(await gone(() => liveMarked(mark)), [], 'no live process with the mark, the one in a session of its own included');
  t.equal(bystander.exitCode, null, 'another tag untouched');
  t.match(run(killMarkedCmd([other])).stdout.toString(), KILL_OK_MARKER);
  t.same(await gone(() => liveMarked(other)), []);
});

t.test('tags are validated', async (t) => {
  for (const tag of ['', 'a b', 'a*', '../x', '-x']) {
    try {
      killTaggedCmd([tag]);
      t.fail(`accepted ${JSON.stringify(tag)}`);
    } catch (err) {
      t.ok(isSandboxError(err, 'invalid_spec'), JSON.stringify(tag));
    }
  }
});

t.test('file scripts', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capybara-files-'));
  const binary = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0]);
  const file = join(dir, 'sub', 'dir', 'bin');
  t.equal(run(writeFileCmd(file), binary).status, 0);
  t.same(run(readFileCmd(file, 100)).stdout, binary);
  t.same(run(readFileCmd(file, 3)).stdout, binary.subarray(0, 3));
  t.equal(run(readFileCmd(join(dir, 'missing'), 10)).status, FILE_EXIT.notFound);
  t.equal(run(readFileCmd(dir, 10)).status, FILE_EXIT.isDirectory);
  t.equal(run(writeFileCmd(dir), 'x').status, FILE_EXIT.isDirectory);
  t.equal(run(writeFileCmd(join(dir, 'empty')), '').status, 0);
  t.match(run(statCmd(join(dir, 'empty'))).stdout.toString(), /^regular empty file\|0\|644\|\d+\.\d{3}\n$/);
  t.equal(run(statCmd(join(dir, 'missing'))).status, FILE_EXIT.notFound);
  t.equal(run(writeFileCmd(join(dir, 'x', '..', '..', 'escape'), dir + '/x'), 'x').status, FILE_EXIT.permissionDenied, 'confined');
  // A FIFO would block the open for good; a device (/dev/zero behind a symlink) never ends.
  const fifo = join(dir, 'fifo');
  t.equal(spawnSync('mkfifo', [fifo]).status, 0);
  symlinkSync('/dev/zero', join(dir, 'zero'));
  for (const [name, path] of [['a FIFO', fifo], ['a device behind a symlink', join(dir, 'zero')]] as const) {
    const read = run(readFileCmd(path, 1 << 20));
    t.equal(read.status, FILE_EXIT.failed, `read ${name}: refused`);
    t.match(read.stderr.toString(), /not a regular file/);
    t.equal(run(writeFileCmd(path), 'x').status, FILE_EXIT.failed, `write ${name}: refused`);
  }
});

t.test('a read gets every byte asked for from a file that answers in short reads', async (t) => {
  // procfs files answer a page or so per read(); a dd without fullblock stopped after 8 KiB.
  const read = run(readFileCmd('/proc/kallsyms', 50_000));
  t.equal(read.status, 0, read.stderr.toString());
  t.equal(read.stdout.length, 50_000);
});

t.test('a FIFO swapped in between the type check and the open never blocks a file script', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capybara-swap-'));
  writeFileSync(join(dir, 'regular'), 'data');
  t.equal(spawnSync('mkfifo', [join(dir, 'fifo')]).status, 0);
  const link = join(dir, 'link');
  symlinkSync('regular', link);
  // Flips the link between the file and the FIFO every quarter of a millisecond or so, each
  // target held as long as the other, so some opens land on the FIFO after a check that saw the
  // file: a script's check-to-open window (a subshell and an exec of dd) lasts milliseconds. The
  // pause keeps the flipper to a fraction of a core; spinning, it took a whole one for as long as
  // the test ran, which under a loaded test run was most of a minute.
  const flipper = spawn('python3', ['-c', `import os, time
d = ${JSON.stringify(dir)}
while True:
    for target in ('fifo', 'regular'):
        os.symlink(target, d + '/next')
        os.replace(d + '/next', d + '/link')
        time.sleep(0.0002)`], { stdio: 'ignore' });
  t.teardown(() => flipper.kill('SIGKILL'));
  const outcomes = new Map<string, number>();
  for (let i = 0; i < 60; i += 1) {
    const read = spawnSync(readFileCmd(link, 100)[0] ?? 'bash', readFileCmd(link, 100).slice(1), { timeout: 3_000 });
    const write = spawnSync(writeFileCmd(link)[0] ?? 'bash', writeFileCmd(link).slice(1), { input: 'x', timeout: 3_000 });
    for (const [op, r] of [['read', read], ['write', write]] as const) {
      const outcome = r.signal !== null ? `${op} blocked` : `${op} exit ${String(r.status)}`;
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    }
  }
  t.comment(JSON.stringify(Object.fromEntries(outcomes)));
  t.notOk(outcomes.has('read blocked') || outcomes.has('write blocked'), 'no read or write waited for a FIFO writer or reader');
});

t.test('a background child outlives its command and is found by its tag later', async (t) => {
  const tag = uniqueTag('bg');
  const mark = execMark(tag, randomUUID());
  const [file, ...args] = wrapperCmd(60, encodeArg(commandPayload('sleep 307 & echo main-done', {}, undefined)), 'off');
  const out = spawnSync(file ?? 'bash', args, { stdio: 'ignore', env: markedEnv(mark) });
  t.equal(out.status, 0, 'main command finished');
  t.equal(liveMarked(mark).length, 1, 'the child runs on, with the mark');
  t.match(run(killTaggedCmd([tag])).stdout.toString(), KILL_OK_MARKER);
  t.same(await gone(() => liveMarked(mark)), [], 'child killed');
});

/**
 * Runs `driver` (a Python program) as the child of a PID 1 that never reaps: Python's
 * subprocess.run waits for its own child only, so every orphan that dies in the new PID
 * namespace stays a zombie, as on a machine whose init reaps slowly (or a sandbox without tini).
 */
function underNonReapingInit(driver: string, args: unknown): ReturnType<typeof spawnSync> {
  const init = 'import subprocess, sys; sys.exit(subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]]).returncode)';
  return spawnSync('unshare', ['-fp', '--mount-proc', 'python3', '-c', init, driver, JSON.stringify(args)], { encoding: 'buffer', timeout: 120_000 });
}

// One pass over /proc as the kill scripts make it (read the stat line, split the fields after
// "(comm) ", read the environment), without killing: the unit the kill's duration is measured in.
const SCAN = String.raw`
n=0
for p in /proc/[0-9]*; do
  read -r line < "$p/stat" 2>/dev/null || continue
  read -r -a f <<< "${'$'}{line##*) }"
  mapfile -d '' -t env < "$p/environ" 2>/dev/null
  [ "${'$'}{f[3]}" = "$1" ] && n=$((n + 1))
done
echo "$n"
`;

const KILL_DRIVER = String.raw`
import json, os, statistics, subprocess, sys, time
a = json.loads(sys.argv[1])

def members(sid):
    live = zombies = 0
    for e in os.listdir('/proc'):
        if not e.isdigit():
            continue
        try:
            s = open('/proc/%s/stat' % e).read()
        except OSError:
            continue
        f = s[s.rindex(')') + 2:].split()
        if f[3] == sid:
            if f[0] in ('Z', 'X'):
                zombies += 1
            else:
                live += 1
    return live, zombies

# A session of its own, as runc starts every exec; the mark in its environment, as Docker sets it.
session = subprocess.Popen(a['wrapper'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=dict(os.environ, **a['env']))
sid = str(session.pid)
deadline = time.monotonic() + 60
while members(sid)[0] < a['processes'] and time.monotonic() < deadline:
    time.sleep(0.05)
before = members(sid)
scans = []
for _ in range(3):
    t0 = time.monotonic()
    subprocess.run(['bash', '-c', a['scan'], 'scan', sid], stdout=subprocess.DEVNULL)
    scans.append(time.monotonic() - t0)
t0 = time.monotonic()
kill = subprocess.run(a['kill'], capture_output=True, text=True)
kill_s = time.monotonic() - t0
session.wait(timeout=10)
time.sleep(0.2)
print(json.dumps({'before': before, 'after': members(sid), 'scan_s': statistics.median(scans), 'kill_s': kill_s, 'stdout': kill.stdout}))
`;

t.test('a kill skips zombies and stops once nothing of the command is alive', async (t) => {
  if (leftOutOfUnitRun(t, 'pidns')) return;
  const missing = toolMissing('unshare', ['--version'], 'util-linux') ?? toolMissing('python3', ['--version'], 'apt-get install python3');
  if (missing) return needUnmet(t, missing);
  const probe = spawnSync('unshare', ['-fp', '--mount-proc', 'true']);
  if (probe.status !== 0) return needUnmet(t, `unshare -fp --mount-proc cannot make a PID namespace here (root needed): ${probe.stderr.toString().trim()}`);
  const processes = 400;
  const mark = execMark('zombies', randomUUID());
  const out = underNonReapingInit(KILL_DRIVER, {
    wrapper: wrapperCmd(120, encodeArg(commandPayload(`for i in $(seq ${processes}); do sleep 300 & done; wait`, {}, undefined)), 'off'),
    env: { [EXEC_MARK_VAR]: mark },
    kill: killMarkedCmd([mark]),
    processes,
    scan: SCAN,
  });
  t.equal(out.status, 0, out.stderr.toString());
  const r = JSON.parse(out.stdout.toString()) as { before: [number, number]; after: [number, number]; scan_s: number; kill_s: number; stdout: string };
  t.comment(`${r.before[0]} live processes; one /proc scan ${(r.scan_s * 1000).toFixed(0)} ms; the kill ${(r.kill_s * 1000).toFixed(0)} ms; after it ${r.after[1]} zombies`);
  t.ok(r.before[0] >= processes, 'the session held every process');
  t.match(r.stdout, KILL_OK_MARKER);
  t.equal(r.after[0], 0, 'nothing of the session is alive');
  t.ok(r.after[1] > 0, 'zombies are left: this PID 1 never reaps');
  // A kill that took zombies for live processes scanned /proc 50 times (4.45 s for 400 processes
  // where 87 ms will do); one that skips them needs a few scans.
  t.ok(r.kill_s < 10 * r.scan_s, `the kill took ${(r.kill_s / r.scan_s).toFixed(1)} scans of /proc, not 50`);
});
