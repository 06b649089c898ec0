/**
 * A stdout that does not take log lines (a stalled pipe, a collector gone slow) never makes the
 * proxy hold them without limit: past the log queue (LOG_QUEUE_BYTES) lines are dropped, every
 * one is counted, and the count is written once stdout takes lines again. Runs the built code
 * (test/proxy/fixtures/log-stall.mjs) in a child whose stdout the test leaves unread.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { LOG_QUEUE_BYTES } from '../../proxy/record/log.js';
import { plainNode } from '../support/plain-node.js';

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'log-stall.mjs');
// About 15 MB of lines: nearly four times the queue.
const LINES = 60_000;
const MIB = 1024 * 1024;

t.test('a stalled stdout: lines past the queue are dropped and counted, memory stays bounded', async (t) => {
  const child = spawn(...plainNode(fixture, [String(LINES)]), { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  t.teardown(() => child.kill('SIGKILL'));
  child.stdout!.pause();
  const report = await new Promise<{ sent: number; peakRss: number }>((resolve) => child.once('message', (m) => resolve(m as { sent: number; peakRss: number })));
  const out: Buffer[] = [];
  child.stdout!.on('data', (d: Buffer) => out.push(d)).resume();
  child.send('reading');
  await new Promise((resolve) => child.once('close', resolve));
  const lines = Buffer.concat(out).toString().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
  const written = lines.filter((l) => l.event === 'burst').length;
  const dropped = lines.filter((l) => l.event === 'log_lines_dropped').reduce((n, l) => n + Number(l.lines), 0);
  t.ok(written < LINES, `${written} of ${LINES} lines written while stdout was stalled`);
  t.equal(written + dropped, LINES, `every line is written or counted (${dropped} dropped)`);
  t.ok(lines.some((l) => l.event === 'last'), 'lines are written again once stdout takes them');
  // The queue is bytes (SonicBoom's buffer mode): at most LOG_QUEUE_BYTES of them, with room as much again, over Node at rest.
  t.ok(report.peakRss < 96 * MIB + 2 * LOG_QUEUE_BYTES, `peak RSS ${(report.peakRss / MIB).toFixed(1)} MiB while ${LINES} lines met a stalled stdout`);
});
