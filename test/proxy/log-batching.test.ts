/**
 * The egress logger's batching (proxy/record/log.ts): a quiet proxy's line is written within the
 * flush delay, and an idle proxy flushes nothing (a flush of nothing cost it an empty write and an
 * fsync on the threadpool, four times a second).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { plainNode } from '../support/plain-node.js';

const LOG = fileURLToPath(new URL('../../dist/proxy/record/log.js', import.meta.url));

// In a process of its own, as the CLI's root logger writes to stdout: it counts the stream's
// flushes over a second of idleness, says so on stderr, then logs one line.
const CHILD = `
import { createLogger } from ${JSON.stringify(LOG)};
import pino from 'pino';
const logger = createLogger('info');
const stream = logger[pino.symbols.streamSym];
let flushes = 0;
const flush = stream.flush.bind(stream);
stream.flush = (...args) => { flushes += 1; return flush(...args); };
setTimeout(() => {
  process.stderr.write('idle flushes ' + flushes + '\\n');
  logger.info({ event: 'one' }, 'one line');
  setTimeout(() => process.exit(0), 1000);
}, 1000);
`;

t.test('an idle logger flushes nothing; a quiet line is written within the flush delay', async (t) => {
  const [cmd, argv] = plainNode('--input-type=module', ['-e', CHILD]);
  const child = spawn(cmd, argv, { cwd: fileURLToPath(new URL('../..', import.meta.url)), stdio: ['ignore', 'pipe', 'pipe'] });
  let idleAt = 0;
  let stderr = '';
  let lineAfter: number | undefined;
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString('utf8');
    if (idleAt === 0 && stderr.includes('idle flushes')) idleAt = Date.now();
  });
  child.stdout.on('data', (d: Buffer) => {
    if (lineAfter === undefined && d.toString('utf8').includes('"event":"one"')) lineAfter = Date.now() - idleAt;
  });
  await new Promise((resolve) => child.on('exit', resolve));
  t.match(stderr, /idle flushes 0\n/, 'a second of idleness: no flush');
  t.ok(lineAfter !== undefined && lineAfter < 1_000, `the line came ${String(lineAfter)} ms after it was logged (the delay is 250 ms)`);
});
