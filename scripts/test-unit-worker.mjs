/**
 * One process of `npm run test:unit` (scripts/test-unit.mjs), started with tsx's loader: takes
 * test file paths from its IPC channel (null: no more) and runs each in turn under this process's
 * tap root, the next once every test of the one before has ended. After each file it writes a
 * TAP comment, the mark given as its argument and JSON (the file, its milliseconds, the counts of
 * its assertions), by which the runner tells the files' output apart. Several files in one
 * process spare each the start of node, tsx and tap (about 1 s of CPU); the runner gives a file a
 * process of its own when it touches what the files would share (soloReason in test-unit.mjs).
 *
 * A file's root teardowns run once its tests have ended (tap would run them at the root's end,
 * and a root teardown makes tap end the root once idle, before the next file could run).
 *
 * The root counts the summary point of a whole skipped test when its parser reads the next line,
 * so such a skip can show under the next file; the process's own total at its end is exact.
 */
import { setTimeout } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import t from 'tap';

/** `after` minus `before`, both tap counts ({ total, pass, fail, skip, todo }, zeros left out). */
function countsSince(before, after) {
  const out = {};
  for (const [key, value] of Object.entries(after)) {
    const n = value - (before[key] ?? 0);
    if (n !== 0) out[key] = n;
  }
  return out;
}

const mark = process.argv[2] ?? '';
const files = [];
let wake;
process.on('message', (file) => {
  files.push(file);
  wake?.();
});
for (;;) {
  if (files.length === 0) {
    // tap unrefs the IPC channel (a test must not wait for its runner): a timer holds the process
    // while it waits for the next file.
    const hold = setInterval(() => {}, 60_000);
    await new Promise((resolve) => { wake = resolve; });
    clearInterval(hold);
  }
  const file = files.shift();
  if (file === null) break;
  const before = t.counts.toJSON();
  const started = performance.now();
  // The file's root teardowns, run below once its tests have ended.
  const teardowns = [];
  t.teardown = (fn) => {
    teardowns.push(fn);
  };
  try {
    await import(pathToFileURL(file).href);
  } catch (err) {
    t.error(err, `${file} loads`);
  }
  // tap's 'idle' event does not come after tests run in parallel (t.jobs): asked every 10 ms.
  while (!t.idle) await setTimeout(10);
  for (const fn of teardowns) {
    try {
      await fn();
    } catch (err) {
      t.error(err, `${file}: a teardown`);
    }
  }
  const ms = Math.round(performance.now() - started);
  // Written directly: a comment on an idle root waits in its queue until the root ends. Node
  // writes to a pipe synchronously, so this line comes after everything the file's tests wrote.
  process.stdout.write(`# ${mark}${JSON.stringify({ file, ms, counts: countsSince(before, t.counts.toJSON()) })}\n`);
}
process.disconnect();
