/**
 * The exec wrapper with a terminal (wrapperCmd's `tty`), run with the host's bash and util-linux
 * script(1), as exec-script.test.ts runs the wrapper: the start byte still comes alone on the
 * stderr pipe, written by script's child once the terminal exists and its fork succeeded (a
 * script that fails is a start that failed, never the command's status); the command then sees a terminal on 0, 1 and 2, its
 * output is one stream on stdout, its exit status is its own, its stdin ends when the caller's
 * does, and a kill by its mark ends it with the session script(1) made. An image without a
 * script(1) that can turn echo off is the wrapper's failure, never the command's.
 */
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
  stagedPayload,
  wrapperCmd,
  type TerminalSettings,
} from '../../../controller/exec/exec-script.js';
import { commandStartFailure } from '../../../controller/exec/sandbox-full.js';
import { leftOutOfUnitRun, needUnmet, toolMissing } from '../../support/needs.js';
import { liveWithEnv } from '../../support/processes.js';

const START = String.fromCharCode(STARTED_BYTE);
const NO_ECHO: TerminalSettings = { echo: false };

function markedEnv(mark: string, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...env, [EXEC_MARK_VAR]: mark };
}

function newMark(name: string): string {
  return execMark(`${name}-${randomUUID().slice(0, 8)}`, randomUUID());
}

function runTty(command: string, opts: { tty?: TerminalSettings; input?: string; mark?: string; env?: NodeJS.ProcessEnv } = {}) {
  const [file, ...args] = wrapperCmd(30, encodeArg(commandPayload(command, {}, undefined, opts.tty ?? NO_ECHO)), 'off', true);
  return spawnSync(file ?? 'bash', args, { input: Buffer.from(opts.input ?? ''), encoding: 'buffer', timeout: 60_000, env: markedEnv(opts.mark ?? newMark('tty'), opts.env) });
}

/** Live processes carrying a mark. */
function liveMarked(mark: string): number[] {
  return liveWithEnv(`${EXEC_MARK_VAR}=${mark}`);
}

const missing = toolMissing('script', ['--version'], 'util-linux (bsdutils)');

t.test('the command runs on a terminal; the start byte comes alone, on the pipe, first', async (t) => {
  if (missing) return needUnmet(t, missing);
  const out = runTty('test -t 0 && test -t 1 && test -t 2 && echo all-tty; echo to-stderr >&2; exit 5');
  t.equal(out.status, 5, out.stderr.toString());
  t.equal(out.stdout.toString(), 'all-tty\r\nto-stderr\r\n', 'one stream, with the terminal\'s CRLF');
  t.equal(out.stderr.toString(), START, 'the start byte and nothing else on the stderr pipe');
});

t.test('stdin reaches the command and its end ends the command\'s stdin; no echo unless asked', async (t) => {
  if (missing) return needUnmet(t, missing);
  const piped = runTty('cat; echo end', { input: 'a\nb\n' });
  t.equal(piped.status, 0, piped.stderr.toString());
  t.equal(piped.stdout.toString(), 'a\r\nb\r\nend\r\n');
  const empty = runTty('cat; echo end');
  t.equal(empty.stdout.toString(), 'end\r\n', 'no stdin: an empty one, as without a terminal');
  const echo = runTty('stty -a', { tty: { echo: true } });
  t.match(echo.stdout.toString(), /(^|\s)echo(\s|$)/, 'echo on when asked');
  t.match(runTty('stty -a').stdout.toString(), /(^|\s)-echo(\s|$)/, 'off by default');
});

t.test('the terminal has the size asked for', async (t) => {
  if (missing) return needUnmet(t, missing);
  t.equal(runTty('stty size', { tty: { rows: 30, cols: 100, echo: false } }).stdout.toString(), '30 100\r\n');
});

t.test('the command arrives whole through script\'s shell, and carries its mark', async (t) => {
  if (missing) return needUnmet(t, missing);
  const mark = newMark('quote');
  const awkward = `it's "quoted" $HOME \\ ü`;
  const out = runTty(`printf '%s|' ${"'" + awkward.replace(/'/g, `'\\''`) + "'"} "$0" "$${EXEC_MARK_VAR}"; printf '\\n'`, { mark });
  t.equal(out.stdout.toString(), `${awkward}|bash|${mark}|\r\n`);
});

t.test('a command too large for an exec body still comes on stdin, then the caller\'s', async (t) => {
  if (missing) return needUnmet(t, missing);
  const mark = newMark('big');
  const staged = stagedPayload(commandPayload(`x=${'y'.repeat(MAX_INLINE_PAYLOAD)}\necho "\${#x}"; cat`, {}, undefined, NO_ECHO), mark);
  const [file, ...args] = wrapperCmd(30, `-${staged.length}`, 'off', true);
  const out = spawnSync(file ?? 'bash', args, { input: Buffer.concat([staged, Buffer.from('caller stdin\n')]), encoding: 'buffer', timeout: 60_000, env: markedEnv(mark) });
  t.equal(out.status, 0, out.stderr.toString());
  t.equal(out.stdout.toString(), `${MAX_INLINE_PAYLOAD}\r\ncaller stdin\r\n`);
});

t.test('a kill by the mark ends the command in the session script made', async (t) => {
  if (missing) return needUnmet(t, missing);
  const mark = newMark('kill');
  const [file, ...args] = wrapperCmd(120, encodeArg(commandPayload('sleep 300 & setsid sleep 301 & echo up; wait', {}, undefined, NO_ECHO)), 'off', true);
  const child = spawn(file ?? 'bash', args, { env: markedEnv(mark), stdio: ['pipe', 'pipe', 'pipe'] });
  t.teardown(() => child.kill('SIGKILL'));
  const closed = new Promise<void>((resolve) => child.on('close', () => resolve()));
  await new Promise<void>((resolve) => child.stdout.on('data', (d: Buffer) => d.toString().includes('up') && resolve()));
  t.ok(liveMarked(mark).length >= 4, 'wrapper, script, shell and the sleeps carry the mark');
  const kill = spawnSync(killMarkedCmd([mark])[0] ?? 'bash', killMarkedCmd([mark]).slice(1), { encoding: 'utf8', timeout: 120_000 });
  t.match(kill.stdout, KILL_OK_MARKER);
  await closed;
  t.same(liveMarked(mark), [], 'nothing of the command is left');
});

t.test('an image whose script(1) cannot turn echo off: the wrapper fails, the command never begins', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capybara-oldscript-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const side = join(dir, 'ran');
  // An old script(1): its help names no --echo.
  writeFileSync(join(dir, 'script'), '#!/bin/sh\necho "Usage: script [options] [file]"\n');
  chmodSync(join(dir, 'script'), 0o755);
  const out = runTty(`touch ${side}`, { env: { ...process.env, PATH: `${dir}:${process.env.PATH ?? ''}` } });
  t.equal(out.status, WRAPPER_FAILED_EXIT);
  t.equal(out.stderr.toString(), `${WRAPPER_FAILED_MARKER}: a command with a terminal (tty) needs script(1) from util-linux 2.35 or later in the image\n`);
  t.notOk(spawnSync('test', ['-e', side]).status === 0, 'nothing of the command ran');
});

t.test('script(1) that cannot fork its child (the pids limit): no start byte, judged sandbox_full', async (t) => {
  if (missing) return needUnmet(t, missing);
  const dir = mkdtempSync(join(tmpdir(), 'capybara-nofork-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const side = join(dir, 'ran');
  // util-linux script at the pids limit: its help as the real one's, then the fork fails as
  // script reports it (err(3) with EAGAIN), exit 1, before any child exists.
  writeFileSync(join(dir, 'script'), `#!/bin/bash\nif [ "$1" = --help ]; then exec ${JSON.stringify(spawnSync('bash', ['-c', 'command -v script'], { encoding: 'utf8' }).stdout.trim())} --help; fi\necho "script: cannot create child process: Resource temporarily unavailable" >&2\nexit 1\n`);
  chmodSync(join(dir, 'script'), 0o755);
  const out = runTty(`touch ${side}`, { env: { ...process.env, PATH: `${dir}:${process.env.PATH ?? ''}` } });
  t.equal(out.status, 1);
  t.notOk(out.stderr.includes(STARTED_BYTE), `no start byte (stderr: ${JSON.stringify(out.stderr.toString())})`);
  const failure = commandStartFailure(out.status, out.stdout.toString(), out.stderr.toString());
  t.equal(failure.kind, 'full', `judged no room: ${failure.detail}`);
  t.notOk(spawnSync('test', ['-e', side]).status === 0, 'nothing of the command ran');
});

t.test('the real script(1) with no pty to open: no start byte, a failed start, never the command\'s status', async (t) => {
  // A mount namespace takes root, as the network namespaces of the 'netns' need do.
  if (leftOutOfUnitRun(t, 'netns')) return;
  if (missing) return needUnmet(t, missing);
  if (process.getuid?.() !== 0) return needUnmet(t, 'root (to hide /dev/ptmx in a mount namespace of its own)');
  const unshare = toolMissing('unshare', ['--version'], 'util-linux');
  if (unshare !== undefined) return needUnmet(t, unshare);
  const [file, ...args] = wrapperCmd(30, encodeArg(commandPayload('echo ran; exit 0', {}, undefined, NO_ECHO)), 'off', true);
  const out = spawnSync('unshare', ['-m', 'bash', '-c', 'mount --bind /dev/null /dev/ptmx && exec "$@"', 'hide-ptmx', file ?? 'bash', ...args], {
    input: '', encoding: 'buffer', timeout: 60_000, env: markedEnv(newMark('nopty')),
  });
  t.not(out.status, 0, out.stderr.toString());
  t.notOk(out.stderr.includes(STARTED_BYTE), `no start byte (stderr: ${JSON.stringify(out.stderr.toString())})`);
  t.notMatch(out.stdout.toString(), /ran/, 'the command did not run');
  const failure = commandStartFailure(out.status, out.stdout.toString(), out.stderr.toString());
  t.equal(failure.kind, 'failed');
  t.match(failure.detail, /script: failed to create pseudo-terminal/);
});
