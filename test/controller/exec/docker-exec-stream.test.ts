/**
 * Streaming `capybara-sandbox exec` on the real engine through the real socket proxy, as a user
 * runs it: the built CLI (dist/) in a process of its own. Output arrives while the command runs,
 * -i passes stdin (and its end), -t gives the command a terminal (under a terminal of the CLI's
 * own, script(1) on the host: raw mode, the size, and the terminal given back), exit codes pass,
 * and a timeout or a SIGINT still kills the command in the sandbox.
 */
import { once } from 'node:events';
import t from 'tap';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { fileNeeds, needUnmet, toolMissing } from '../../support/needs.js';

await fileNeeds(t, 'engine');

const root = join(dirname(fileURLToPath(import.meta.url)), '../../..');
const bin = join(root, 'dist/controller/operator/cli.js');

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
  /** ms from the start to the first stdout chunk, and to the end. */
  firstOutMs: number | undefined;
  firstErrMs: number | undefined;
  endMs: number;
}

t.test('streaming exec through the CLI', async (t) => {
  if (!existsSync(bin)) return needUnmet(t, 'dist not built (npm run build)');
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env } = s;
  const h = await provider.create({ id: `${env.runId}-stream`, image: SANDBOX_IMAGE, limits: { egress: 'none', memoryMb: 256 } });
  t.teardown(() => provider.destroy(h));
  const global = ['--endpoint', s.proxy.endpoint, '--network', s.sharedNetwork];

  /**
   * Runs the CLI; `input` is written to its stdin (undefined: the pipe stays open), `signal` sent
   * once its stdout holds `signalAt`: the command runs then, whatever a loaded machine made of the
   * CLI's start (a signal at a fixed delay could come before the CLI took it over).
   */
  const cli = (args: string[], opts: { input?: string; close?: boolean; signal?: NodeJS.Signals; signalAt?: string } = {}): Promise<Ran> => new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(process.execPath, [bin, ...global, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const ran: Ran = { code: null, stdout: '', stderr: '', firstOutMs: undefined, firstErrMs: undefined, endMs: 0 };
    let signalled = false;
    child.stdout.on('data', (d: Buffer) => {
      ran.firstOutMs ??= Date.now() - started;
      ran.stdout += d.toString();
      if (opts.signal !== undefined && !signalled && ran.stdout.includes(opts.signalAt ?? '')) {
        signalled = true;
        child.kill(opts.signal);
      }
    });
    child.stderr.on('data', (d: Buffer) => {
      ran.firstErrMs ??= Date.now() - started;
      ran.stderr += d.toString();
    });
    if (opts.input !== undefined) child.stdin.write(opts.input);
    if (opts.close === true) child.stdin.end();
    const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code) => {
      clearTimeout(guard);
      child.stdin.destroy();
      resolve({ ...ran, code, endMs: Date.now() - started });
    });
  });
  const seen = (r: Ran, withStderr = false) => (withStderr ? { code: r.code, stdout: r.stdout, stderr: r.stderr } : { code: r.code, stdout: r.stdout });
  /** The sandbox user's sleeps still alive (the image's own sleep is root's). */
  const sleeps = async (): Promise<string> => (await provider.exec(h, 'ps -u 1000 -o comm= | grep -c "^sleep$"')).stdout.trim();

  await t.test('output arrives while the command runs; the exit code passes', async (t) => {
    const r = await cli(['exec', h.id, '--', 'echo first; echo err-first >&2; sleep 2; echo second; exit 7'], { close: true });
    t.equal(r.code, 7, r.stderr);
    t.equal(r.stdout, 'first\nsecond\n');
    t.equal(r.stderr, 'err-first\n');
    t.ok(r.firstOutMs !== undefined && r.endMs - r.firstOutMs >= 1500, `stdout's first line came ${r.endMs - (r.firstOutMs ?? r.endMs)} ms before the end`);
    t.ok(r.firstErrMs !== undefined && r.endMs - r.firstErrMs >= 1500, 'so did stderr\'s');
  });

  await t.test('output past maxLimits.outputBytes (16 MiB) is streamed whole: nothing held, nothing cut', async (t) => {
    const size = 16 * 1024 * 1024 + 1_000_000;
    const r = await cli(['exec', h.id, '--', `head -c ${size} /dev/zero`], { close: true });
    t.equal(r.code, 0, r.stderr);
    t.equal(r.stdout.length, size, 'every byte came');
    t.equal(r.stderr, '', 'no note of anything dropped');
  });

  await t.test('-i passes stdin and its end; without -i the command\'s stdin is empty', async (t) => {
    t.same(seen(await cli(['exec', '-i', h.id, '--', 'cat'], { input: 'a\nb\n', close: true })), { code: 0, stdout: 'a\nb\n' }, 'piped stdin');
    t.same(seen(await cli(['exec', h.id, '--', 'cat; echo end'], { input: 'not read\n' })), { code: 0, stdout: 'end\n' }, 'no -i: nothing read, even from an open pipe');
    const open = await cli(['exec', '-i', h.id, '--', 'head -n 1'], { input: 'one\ntwo\n' });
    t.same([open.code, open.stdout], [0, 'one\n'], 'the command ends while the CLI\'s stdin is still open: the CLI ends too');
  });

  await t.test('-t gives the command a terminal, one stream', async (t) => {
    t.same(seen(await cli(['exec', '-t', h.id, '--', 'test -t 0 && test -t 1 && echo tty; echo err >&2; exit 3'], { close: true }), true), { code: 3, stdout: 'tty\r\nerr\r\n', stderr: '' });
    t.same(seen(await cli(['exec', h.id, '--', 'test -t 1 || echo no-tty'], { close: true })), { code: 0, stdout: 'no-tty\n' });
    t.same(seen(await cli(['exec', '-i', '-t', h.id, '--', 'cat'], { input: 'a\nb\n', close: true })), { code: 0, stdout: 'a\r\nb\r\n' }, 'piped into -it: no echo, the end is an end of file');
  });

  await t.test('-it at a terminal: raw mode, the size, echo, and the terminal given back', async (t) => {
    const missing = toolMissing('script', ['--version'], 'util-linux (bsdutils)');
    if (missing) return needUnmet(t, missing);
    const line = [process.execPath, bin, ...global, 'exec', '-it', h.id, '--', "'stty size; cat; echo cat-done'"].join(' ');
    // Typed once the command has printed its terminal's size (the CLI's terminal is raw by then;
    // a fixed delay could type into a terminal still canonical after a slow start): "hello", Enter
    // (CR at a raw terminal), then, once cat has copied the line, Ctrl-D. script's stdin stays
    // open until it ends.
    const shell = `stty rows 30 cols 100; ${line}; echo "cli=$?"; stty -a | grep -o -- '-\\?icanon' | head -1`;
    const typed = spawn('script', ['-qec', shell, '/dev/null']);
    typed.stdin.on('error', () => undefined);
    let out = '';
    let typedSteps = 0;
    typed.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const shown = out.replace(/\r/g, '');
      if (typedSteps === 0 && /^30 100\n/m.test(shown)) {
        typedSteps = 1;
        typed.stdin.write('hello\r');
      } else if (typedSteps === 1 && /hello\nhello\n/.test(shown)) {
        typedSteps = 2;
        typed.stdin.write('\x04');
      }
    });
    const guard = setTimeout(() => typed.kill('SIGKILL'), 60_000);
    await new Promise((resolve) => typed.on('close', resolve));
    clearTimeout(guard);
    typed.stdin.destroy();
    const text = out.replace(/\r/g, '');
    t.match(text, /^30 100\n/m, 'the command\'s terminal has the size of the CLI\'s');
    t.match(text, /hello\nhello\ncat-done\n/, 'echo of what was typed, then cat\'s copy; Ctrl-D ended cat');
    t.match(text, /cli=0\n/);
    t.match(text, /\nicanon\n/, 'the CLI\'s terminal is back in canonical mode');
  });

  await t.test('a timeout kills the command and exits 124', async (t) => {
    const r = await cli(['exec', '--timeout', '2', h.id, '--', 'echo a; sleep 30'], { close: true });
    t.same([r.code, r.stdout], [124, 'a\n']);
    t.match(r.stderr, /the command timed out and was killed/);
    t.equal(await sleeps(), '0', 'nothing of it is left');
  });

  await t.test('a SIGINT to the CLI kills the command and exits 130', async (t) => {
    const r = await cli(['exec', '-t', h.id, '--', 'echo up; sleep 30'], { close: true, signal: 'SIGINT', signalAt: 'up' });
    t.same([r.code, r.stdout], [130, 'up\r\n']);
    t.match(r.stderr, /SIGINT came; the command was killed/);
    t.equal(await sleeps(), '0', 'nothing of it is left');
  });

  await t.test('a reader that goes away (| head) kills the command: exit 141 as SIGPIPE, no stack trace', async (t) => {
    const started = Date.now();
    const child = spawn(process.execPath, [bin, ...global, 'exec', h.id, '--', 'echo first; sleep 1; while :; do echo more; sleep 0.2; done'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    // The first line read, the read end closed: the next write of the CLI fails EPIPE.
    await once(child.stdout, 'data');
    child.stdout.destroy();
    const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const [code] = (await once(child, 'close')) as [number | null];
    clearTimeout(guard);
    t.equal(code, 141, `exit 141 (stderr: ${stderr})`);
    t.match(stderr, /the output's reader went away; the command was killed/);
    t.notMatch(stderr, /EPIPE|at .*\(node:/, 'no stack trace');
    t.ok(Date.now() - started < 30_000, 'it ended well before the command would have');
    t.equal(await sleeps(), '0', 'nothing of it is left');
  });
});
