/**
 * The last log lines before the process ends reach the log: a child process logs a burst that
 * fills its stdout pipe (the parent reads nothing yet), then ends the way the CLI ends, and
 * every line must come out, in one piece. Before exit.ts, process.exit() dropped the batch that
 * was waiting to be written. Runs the built code (test/proxy/fixtures/log-burst-exit.mjs).
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { EXIT_FLUSH_MS } from '../../proxy/exit.js';
import { plainNode } from '../support/plain-node.js';

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'log-burst-exit.mjs');
// About 2.6 MB of log: far more than a pipe holds, and within the log queue (LOG_QUEUE_BYTES),
// past which lines are dropped and counted (log-stall.test.ts).
const LINES = 10_000;

interface Ended {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

/** Runs the fixture; reads its stdout only once it says it is ending (`read: false`: never). */
function run(how: string, read: boolean, killAfterMs: number): Promise<Ended> {
  return new Promise((resolve) => {
    const start = Date.now();
    const child = spawn(...plainNode(fixture, [how, String(LINES)]), { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout!.pause();
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('message', () => {
      if (read) child.stdout!.on('data', (d: Buffer) => out.push(d)).resume();
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    // 'close' comes once the process has exited and its pipes are read to the end; a stdout
    // nobody reads never ends, so there the exit is enough.
    child.on(read ? 'close' : 'exit', (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(killer);
      if (!read) child.stdout!.destroy();
      resolve({ code, signal, stdout: Buffer.concat(out).toString(), stderr, ms: Date.now() - start });
    });
  });
}

const ways: { name: string; how: string; code: number; fatal: boolean }[] = [
  { name: 'a fatal error reaching the top level', how: 'fatal', code: 1, fatal: true },
  { name: 'an uncaught exception', how: 'uncaught', code: 1, fatal: true },
  { name: 'an unhandled rejection', how: 'rejection', code: 1, fatal: true },
  { name: 'a clean exit with a status (exit 2 after start-up)', how: 'exit2', code: 2, fatal: false },
];

for (const w of ways) {
  t.test(`every log line is written before the end: ${w.name}`, async (t) => {
    const ended = await run(w.how, true, 60_000);
    t.equal(ended.code, w.code, `exit status ${w.code}`);
    const lines = ended.stdout.split('\n').filter((l) => l !== '');
    const parsed: { event?: string; i?: number }[] = [];
    let broken = 0;
    for (const l of lines) {
      try {
        parsed.push(JSON.parse(l) as { event?: string; i?: number });
      } catch {
        broken += 1;
      }
    }
    t.equal(broken, 0, 'no line cut in two');
    const seen = new Set(parsed.filter((p) => p.event === 'burst').map((p) => p.i));
    t.equal(seen.size, LINES, `all ${LINES} lines of the burst (${LINES - seen.size} missing)`);
    t.ok(parsed.some((p) => p.event === 'last'), 'the last line before the end');
    if (w.fatal) {
      t.ok(parsed.some((p) => p.event === 'fatal'), 'the fatal line, in the log');
      t.ok(parsed.some((p) => p.event === 'stopped_serving'), 'serving stopped first');
      t.match(ended.stderr, /capybara-egress: fatal: Error: boom/, 'and on stderr');
    }
  });
}

t.test('a log reader that never reads does not keep a failed process alive', async (t) => {
  const ended = await run('fatal', false, EXIT_FLUSH_MS + 20_000);
  t.equal(ended.signal, null, 'not killed by the test');
  t.equal(ended.code, 1, 'exit status 1');
  t.ok(ended.ms < EXIT_FLUSH_MS + 10_000, `ended after ${ended.ms} ms (the flush waits at most ${EXIT_FLUSH_MS} ms)`);
  t.match(ended.stderr, /capybara-egress: fatal: Error: boom/);
});
