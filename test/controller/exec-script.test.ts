import t from 'tap';
import { spawnSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  KILL_OK_MARKER,
  commandPayload,
  controlFile,
  encodeArg,
  killFilesCmd,
  killTaggedCmd,
  readFileCmd,
  shellQuote,
  statCmd,
  wrapperCmd,
  writeFileCmd,
  FILE_EXIT,
} from '../../controller/exec/exec-script.js';
import { isSandboxError } from '../../controller/spec/errors.js';
import { leftOutOfUnitRun, needUnmet, toolMissing } from '../support/needs.js';

// These run the scripts with the host's bash and coreutils (no Docker): the same programs the
// sandbox image ships.
function run(cmd: string[], input?: Buffer | string) {
  const [file, ...args] = cmd;
  return spawnSync(file ?? 'bash', args, { input: typeof input === 'string' ? Buffer.from(input) : input, encoding: 'buffer', timeout: 10_000 });
}

/**
 * Live processes of a session. A killed process stays a zombie until its parent, or PID 1 for an
 * orphan, reaps it, and a PID 1 may reap slowly or never (tini does in the sandbox; a test
 * machine's may not), so zombies (state Z) do not count as left over.
 */
function liveInSession(sid: string): number[] {
  const live: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    // Fields after "(comm) ": state ppid pgrp session ...
    const [state, , , session] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (session === sid && state !== 'Z') live.push(Number(entry));
  }
  return live;
}

/** Waits (with a deadline) until no live process is left in the session; returns what is left. */
async function sessionEnded(sid: string, deadlineMs = 10_000): Promise<number[]> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const left = liveInSession(sid);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 20));
  }
}

t.test('every exec argument is ASCII without JSON escapes', async (t) => {
  const cmd = wrapperCmd(controlFile('agent-1', randomUUID()), 65, encodeArg(commandPayload('echo "héllo\tworld" \u0001', { V: 'ü\nx' }, '/tmp/ä')));
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

t.test('wrapper runs the command with env and cwd, records and removes its control file', async (t) => {
  const ctl = controlFile('t1', randomUUID());
  const payload = encodeArg(commandPayload('echo "$GREETING from $(pwd)"; cat; exit 3', { GREETING: "it's ü" }, '/tmp'));
  const out = run(wrapperCmd(ctl, 30, payload), 'stdin-data');
  t.equal(out.status, 3);
  t.equal(out.stdout.toString(), "it's ü from /tmp\nstdin-data");
  t.notOk(existsSync(ctl), 'control file removed');
});

t.test('a missing cwd is a clear error', async (t) => {
  const out = run(wrapperCmd(controlFile('t1', randomUUID()), 30, encodeArg(commandPayload('true', {}, '/nonexistent-dir'))));
  t.equal(out.status, 126);
  t.match(out.stderr.toString(), 'cannot change directory to /nonexistent-dir');
});

t.test('backstop kills a command that outlives its limit', async (t) => {
  const started = Date.now();
  const out = run(wrapperCmd(controlFile('t1', randomUUID()), 1, encodeArg('sleep 30')));
  t.equal(out.status, 137);
  t.ok(Date.now() - started < 10_000);
});

t.test('kill by control file ends the session including background children', async (t) => {
  const ctl = controlFile('victim', randomUUID());
  const marker = `capybara-test-${randomUUID()}`;
  const [file, ...args] = wrapperCmd(ctl, 60, encodeArg(`sleep 300 & sleep 301; echo ${marker}`));
  const child = spawn(file ?? 'bash', args, { stdio: 'ignore' });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  for (let i = 0; i < 500 && !existsSync(ctl); i += 1) await new Promise((r) => setTimeout(r, 20));
  const sid = readFileSync(ctl, 'utf8').trim();
  const other = controlFile('other', randomUUID());
  writeFileSync(other, '999999999\n');
  const killed = run(killTaggedCmd(['victim']));
  t.match(killed.stdout.toString(), KILL_OK_MARKER);
  t.equal(await exited, null, 'wrapper killed');
  t.same(await sessionEnded(sid), [], 'no live process left in the session');
  t.notOk(existsSync(ctl));
  t.ok(existsSync(other), 'other tags untouched');
  t.match(run(killFilesCmd([other])).stdout.toString(), KILL_OK_MARKER);
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
  // Flips the link between the file and the FIFO as fast as it can, so some opens land on the
  // FIFO after a check that saw the file.
  const flipper = spawn('python3', ['-c', `import os
d = ${JSON.stringify(dir)}
while True:
    for target in ('fifo', 'regular'):
        os.symlink(target, d + '/next')
        os.replace(d + '/next', d + '/link')`], { stdio: 'ignore' });
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

t.test('a background child holding the session keeps the control file for a later kill', async (t) => {
  const ctl = controlFile('bg', randomUUID());
  const [file, ...args] = wrapperCmd(ctl, 60, encodeArg('sleep 307 & echo main-done'));
  const out = spawnSync(file ?? 'bash', args, { stdio: 'ignore' });
  t.equal(out.status, 0, 'main command finished');
  t.ok(existsSync(ctl), 'control file kept while the child lives');
  const sid = readFileSync(ctl, 'utf8').trim();
  t.match(run(killTaggedCmd(['bg'])).stdout.toString(), KILL_OK_MARKER);
  t.same(await sessionEnded(sid), [], 'child killed');
  t.notOk(existsSync(ctl));
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
// "(comm) "), without killing: the unit the kill's duration is measured in.
const SCAN = String.raw`
n=0
for p in /proc/[0-9]*; do
  read -r line < "$p/stat" 2>/dev/null || continue
  read -r -a f <<< "${'$'}{line##*) }"
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

session = subprocess.Popen(a['wrapper'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 60
while not os.path.exists(a['ctl']) and time.monotonic() < deadline:
    time.sleep(0.01)
sid = open(a['ctl']).read().strip()
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

t.test('a kill skips zombies and stops once nothing of the session is alive', async (t) => {
  if (leftOutOfUnitRun(t, 'pidns')) return;
  const missing = toolMissing('unshare', ['--version'], 'util-linux') ?? toolMissing('python3', ['--version'], 'apt-get install python3');
  if (missing) return needUnmet(t, missing);
  const probe = spawnSync('unshare', ['-fp', '--mount-proc', 'true']);
  if (probe.status !== 0) return needUnmet(t, `unshare -fp --mount-proc cannot make a PID namespace here (root needed): ${probe.stderr.toString().trim()}`);
  const processes = 400;
  const ctl = controlFile('zombies', randomUUID());
  const out = underNonReapingInit(KILL_DRIVER, {
    wrapper: wrapperCmd(ctl, 120, encodeArg(`for i in $(seq ${processes}); do sleep 300 & done; wait`)),
    kill: killFilesCmd([ctl]),
    ctl,
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
