/**
 * `npm run test:unit`: every test that needs no Docker engine and no network namespace (which
 * takes root), for a machine that has neither; `npm run build` runs first (a few tests run the
 * built commands). A test file whose every test needs one of them says so at its top,
 * `await fileNeeds(t, 'engine')` (test/support/needs.ts), and is left out; every other test file
 * runs, with CAPYBARA_TEST_UNIT=1, under which a single engine test among unit tests skips with
 * its reason. A file is left out only by its own declaration, which test/scripts/test-unit.test.ts
 * checks against what the file uses, so no unit test can drop out unseen.
 *
 * The files run as tap runs them, each a node program whose root test is tap's, but without tap's
 * runner: tap starts a process per file with its process tracker loaded into it, about 2 s of CPU
 * per file before the first test, which on 2 cores was more than half of the run. Here a file
 * runs in a worker process (test-unit-worker.mjs, under tsx) that runs files one after another,
 * or in a process of its own when it touches what files in one process would share (soloReason).
 * `jobs` processes run at a time (twice the CPUs by default: many tests wait on timers and
 * peers), the longest files first by the last run's times. Arguments: --jobs N, and unit test
 * files to run only those.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** The needs a file can declare (needs.ts's `Need`). */
export const NEEDS = ['engine', 'netns', 'pidns'];

/** Every test file under `root`/test, relative to `root`, sorted. */
export function testFiles(root) {
  return readdirSync(join(root, 'test'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => join('test', f))
    .sort();
}

/** Whether `node` is a call of fileNeeds. */
function isFileNeeds(node) {
  return ts.isCallExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'fileNeeds';
}

/**
 * The need a test file's text declares for the whole file, or undefined: a statement of the
 * file's top level, `await fileNeeds(t, '<need>');`. A call of fileNeeds anywhere else or in
 * another form, a need not in NEEDS, or two declarations are errors: a declaration this reader
 * missed would put a file in the wrong run.
 */
export function declaredNeed(text) {
  const source = ts.createSourceFile('test.ts', text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  let calls = 0;
  const count = (node) => {
    if (isFileNeeds(node)) calls += 1;
    ts.forEachChild(node, count);
  };
  count(source);
  const declared = source.statements
    .map((s) => (ts.isExpressionStatement(s) && ts.isAwaitExpression(s.expression) ? s.expression.expression : undefined))
    .filter((call) => call !== undefined && isFileNeeds(call) && call.arguments.length === 2 && ts.isStringLiteral(call.arguments[1]))
    .map((call) => call.arguments[1].text);
  if (calls !== declared.length) throw new Error("a fileNeeds call not written as `await fileNeeds(t, '<need>');` at the file's top level");
  if (declared.length > 1) throw new Error('more than one fileNeeds declaration');
  const need = declared[0];
  if (need !== undefined && !NEEDS.includes(need)) throw new Error(`unknown need '${need}' (known: ${NEEDS.join(', ')})`);
  return need;
}

/** The test files of the unit run: those that declare no need. */
export function unitTestFiles(root) {
  return testFiles(root).filter((file) => {
    try {
      return declaredNeed(readFileSync(join(root, file), 'utf8')) === undefined;
    } catch (err) {
      throw new Error(`${file}: ${err.message}`);
    }
  });
}

/** How a worker marks the end of a file in its output (a TAP comment: "# " comes first); no test prints it. */
const WORKER_MARK = `test-unit-worker-${randomUUID()} `;

/**
 * What a file may call on tap's root and still share a process: registering its tests, a
 * teardown (the worker runs it once the file's tests have ended), assertions.
 */
const SHARED_ROOT_CALLS = new Set([
  'test', 'skip', 'todo', 'comment', 'teardown',
  // Assertions on the root count toward the file whose import made them.
  'ok', 'notOk', 'equal', 'not', 'same', 'notSame', 'strictSame', 'match', 'notMatch', 'has', 'type', 'pass', 'fail', 'error', 'throws', 'rejects',
]);
/** Calls that only read the object given to them: `Object.keys(process.env)`. */
const READERS = new Set(['keys', 'values', 'entries']);
/** What of `process` outlives the file that touches it: such a file gets a process of its own. */
const PROCESS_STATE = new Set([
  'on', 'once', 'addListener', 'prependListener', 'prependOnceListener', 'off', 'removeListener', 'removeAllListeners',
  'exit', 'exitCode', 'abort', 'chdir', 'umask', 'setUncaughtExceptionCaptureCallback', 'setSourceMapsEnabled', 'stdin',
]);

/** Whether a binding name (an identifier or a destructuring pattern) binds `name`. */
function binds(node, name) {
  if (ts.isIdentifier(node)) return node.text === name;
  if (ts.isObjectBindingPattern(node) || ts.isArrayBindingPattern(node)) {
    return node.elements.some((e) => !ts.isOmittedExpression(e) && binds(e.name, name));
  }
  return false;
}

/** Whether `node`, an expression, is written to: assigned, deleted, incremented. */
function isWritten(node) {
  const p = node.parent;
  if (ts.isBinaryExpression(p) && p.left === node && p.operatorToken.kind >= ts.SyntaxKind.FirstAssignment && p.operatorToken.kind <= ts.SyntaxKind.LastAssignment) return true;
  const step = (u) => u.operator === ts.SyntaxKind.PlusPlusToken || u.operator === ts.SyntaxKind.MinusMinusToken;
  return ts.isDeleteExpression(p) || ((ts.isPrefixUnaryExpression(p) || ts.isPostfixUnaryExpression(p)) && step(p));
}

/**
 * Why a test file must run in a process of its own, or undefined when it can run after other
 * files in one process (scripts/test-unit-worker.mjs). Allowed: what the file does inside its
 * tests (each gets its own `t`); on tap's root, registering tests (`t.test`, `t.skip`, `t.todo`,
 * `t.comment`), teardowns (`t.teardown`) and assertions; reading process.env. Anything else is a
 * reason: any other use of the root (a hook on it would run for later files, `t.jobs` would set
 * their parallelism, a plan would count them), a write to process.env, a listener on the
 * process, an exit code, a working directory.
 */
export function soloReason(text) {
  const source = ts.createSourceFile('test.ts', text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  let root;
  for (const s of source.statements) {
    if (!ts.isImportDeclaration(s) || !ts.isStringLiteral(s.moduleSpecifier) || s.moduleSpecifier.text !== 'tap') continue;
    const clause = s.importClause;
    if (clause === undefined || clause.isTypeOnly) continue;
    const typesOnly = clause.namedBindings === undefined || (ts.isNamedImports(clause.namedBindings) && clause.namedBindings.elements.every((e) => e.isTypeOnly));
    if (clause.name === undefined || !typesOnly) return 'imports from tap other than its root';
    root = clause.name.text;
  }
  let reason;
  const visit = (node, shadowed) => {
    if (reason !== undefined) return;
    if (ts.isFunctionLike(node) && node.parameters?.some((p) => binds(p.name, root))) shadowed = true;
    if (root !== undefined && ts.isVariableDeclaration(node) && binds(node.name, root)) {
      reason = `declares another ${root}`;
    } else if (root !== undefined && ts.isIdentifier(node) && node.text === root && !shadowed) {
      const p = node.parent;
      const isName = ts.isImportClause(p) || ((ts.isPropertyAccessExpression(p) || ts.isPropertyAssignment(p) || ts.isMethodDeclaration(p) || ts.isPropertyDeclaration(p)) && p.name === node);
      const registers = ts.isPropertyAccessExpression(p) && p.expression === node && SHARED_ROOT_CALLS.has(p.name.text)
        && ts.isCallExpression(p.parent) && p.parent.expression === p;
      if (!isName && !registers) reason = `uses tap's root: ${p.getText(source).slice(0, 60)}`;
    } else if (ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'process') {
      const member = node.name.text;
      if (PROCESS_STATE.has(member)) reason = `touches process.${member}`;
      else if (member === 'env') {
        const p = node.parent;
        const read = ((ts.isPropertyAccessExpression(p) || ts.isElementAccessExpression(p)) && p.expression === node && !isWritten(p))
          || ts.isSpreadAssignment(p) || ts.isSpreadElement(p)
          || (ts.isCallExpression(p) && p.arguments.length === 1 && ts.isPropertyAccessExpression(p.expression)
            && ts.isIdentifier(p.expression.expression) && p.expression.expression.text === 'Object' && READERS.has(p.expression.name.text));
        if (!read) reason = `uses process.env other than reading it: ${p.getText(source).slice(0, 60)}`;
      }
    }
    ts.forEachChild(node, (child) => visit(child, shadowed));
  };
  visit(source, false);
  return reason;
}

/**
 * One node process running test files (scripts/test-unit-worker.mjs): `run` gives it a file and
 * resolves with the file's result once its tests have ended, it crashed, or it ran out of time;
 * `finish` closes its input and waits for the process to end.
 */
class Worker {
  constructor(root, env) {
    this.proc = spawn(process.execPath, ['--import=tsx', fileURLToPath(new URL('./test-unit-worker.mjs', import.meta.url)), WORKER_MARK], {
      cwd: root, env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'], detached: true,
    });
    this.output = [];
    /** The counts of the files it reported, summed. */
    this.counted = {};
    this.current = undefined;
    // 'close': the process has ended and all it wrote has been read.
    this.exited = new Promise((resolve) => this.proc.once('close', (code, signal) => resolve({ code, signal })));
    this.exited.then((end) => this.current?.({ crashed: end }));
    createInterface({ input: this.proc.stdout, crlfDelay: Infinity }).on('line', (line) => this.#line(line));
    createInterface({ input: this.proc.stderr, crlfDelay: Infinity }).on('line', (line) => this.output.push(line));
  }

  #line(line) {
    if (line.startsWith(`# ${WORKER_MARK}`)) this.current?.({ done: JSON.parse(line.slice(2 + WORKER_MARK.length)) });
    else this.output.push(line);
  }

  /** Kills the worker and every process its tests started and left (its process group). */
  kill() {
    try {
      process.kill(-this.proc.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }

  /** Runs one file: { file, ms, counts, output, problem? }. */
  async run(file, timeoutMs) {
    const started = Date.now();
    this.output = [];
    const outcome = await new Promise((resolve) => {
      this.current = resolve;
      // A worker gone meanwhile is reported by its exit (a failed send is no error of its own).
      this.proc.send(file, () => undefined);
      this.timer = setTimeout(() => resolve({ timedOut: true }), timeoutMs);
    });
    clearTimeout(this.timer);
    this.current = undefined;
    const output = this.output;
    this.output = [];
    if (outcome.done !== undefined) {
      for (const [key, n] of Object.entries(outcome.done.counts)) this.counted[key] = (this.counted[key] ?? 0) + n;
      return { file, ms: outcome.done.ms, counts: outcome.done.counts, output };
    }
    if (outcome.timedOut) this.kill();
    const problem = outcome.timedOut ? `did not end within ${timeoutMs / 1000} s (killed)`
      : `its process ended (${outcome.crashed.signal ?? `status ${outcome.crashed.code}`}) before its tests did`;
    return { file, ms: Date.now() - started, counts: { fail: 1 }, output, problem, lost: true };
  }

  /**
   * Ends the worker (killed after `timeoutMs`), and what its tests left running: { code, signal,
   * output, uncounted }: what it wrote after its last file, and
   * what its root counted beyond the files' counts (see the worker's note on skips), from the
   * counts the root writes at its end.
   */
  async finish(timeoutMs) {
    // A worker that is ending may close its channel after `connected` was read: the send then
    // fails (EPIPE), which without a callback is an 'error' event nobody listens for.
    if (this.proc.connected) this.proc.send(null, () => undefined);
    const timer = setTimeout(() => this.kill(), timeoutMs);
    const end = await this.exited;
    clearTimeout(timer);
    this.kill(); // whatever its tests left running
    const final = this.output.findLast((l) => l.startsWith('# { total: '));
    const uncounted = {};
    for (const [, key, n] of final?.matchAll(/(\w+): (\d+)/g) ?? []) uncounted[key] = Number(n) - (this.counted[key] ?? 0);
    return { ...end, output: this.output, uncounted };
  }
}

const COUNT_KEYS = ['pass', 'fail', 'skip', 'todo'];

/** The milliseconds per file of the last run; none when there is no record or it cannot be read. */
function readTimes(file) {
  try {
    return Object.fromEntries(Object.entries(JSON.parse(readFileSync(file, 'utf8'))).filter(([, ms]) => Number.isFinite(ms)));
  } catch {
    return {};
  }
}

/** Records the files' times; a run that cannot record them still stands, and says so. */
function writeTimes(file, times) {
  try {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, `${JSON.stringify(times, null, 1)}\n`);
  } catch (err) {
    process.stderr.write(`test-unit: could not record the files' times in ${file} (${err.message}); the next run keeps the default order\n`);
  }
}

function usage(message) {
  process.stderr.write(`test-unit: ${message}\nusage: npm run test:unit [-- [--jobs N] [test files...]]\n`);
  process.exit(2);
}

/**
 * --jobs N (or -jN, --jobs=N) and test files (relative to `cwd`), which must be unit files; none
 * means every unit file.
 */
function parseArgs(argv, root, cwd, units) {
  let jobs = Math.max(2, availableParallelism() * 2);
  const files = [];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    const jobsArg = /^(?:-j|--jobs=?)(\d*)$/.exec(arg);
    if (jobsArg !== null) {
      const value = jobsArg[1] !== '' ? jobsArg[1] : argv[++i];
      if (value === undefined || !/^[1-9]\d{0,2}$/.test(value)) usage(`${arg} wants a number of processes from 1 to 999`);
      jobs = Number(value);
    } else if (arg.startsWith('-')) {
      usage(`unknown option ${arg}`);
    } else {
      const file = relative(root, resolve(cwd, arg));
      if (!units.includes(file)) usage(`${arg} is not a unit test file (npx tap ${arg} runs any test file)`);
      files.push(file);
    }
  }
  return { jobs, files: files.length > 0 ? files : units };
}

/**
 * Runs test files, `jobs` processes at a time (see the top of this file): a file that touches what
 * files would share (soloReason) in a process of its own, the others one after another in shared
 * processes. Writes a line per file as it ends (with its output when it failed) and a summary.
 * `files` are relative to `root` or absolute; `timesFile` (optional) records each file's time for
 * the next run's order. Resolves with { totals, failed } (failed: the files, and processes, that
 * did not pass).
 */
export async function runTestFiles({ root, files, jobs, env, timesFile, fileTimeoutMs = 600_000, endTimeoutMs = 60_000, write = (s) => process.stdout.write(s) }) {
  const solo = new Map(files.map((f) => [f, soloReason(readFileSync(resolve(root, f), 'utf8'))]).filter(([, r]) => r !== undefined));
  // The longest files first, by the last run's times (a file not timed yet counts as long), so
  // that no long one starts last; with no record, the files of their own first (those that set a
  // root up tend to be long: many processes, timers). Only the order depends on the times.
  const record = timesFile === undefined ? {} : readTimes(timesFile);
  const known = Object.keys(record).length > 0;
  const guess = (f) => (known ? record[f] ?? Infinity : solo.has(f) ? 1 : 0);
  const queue = [...files].sort((a, b) => guess(b) - guess(a));
  const took = {};
  const started = Date.now();
  const totals = { pass: 0, fail: 0, skip: 0, todo: 0 };
  const failed = [];
  const live = new Set();
  write(`${files.length} test files, ${jobs} at a time; ${solo.size} in a process of their own, the rest share processes\n`);

  const report = (r) => {
    for (const key of COUNT_KEYS) totals[key] += r.counts[key] ?? 0;
    const bad = (r.counts.fail ?? 0) > 0 || r.problem !== undefined;
    // A whole skipped test is counted by the root a line later (test-unit-worker.mjs).
    const counts = COUNT_KEYS.filter((k) => r.counts[k]).map((k) => `${r.counts[k]} ${k}`).join(', ')
      || (r.output.some((l) => /^ok \d+ .*# (SKIP|TODO)/.test(l)) ? 'whole tests skipped' : 'no assertions');
    write(`${bad ? 'FAIL' : 'ok  '} ${(r.ms / 1000).toFixed(1).padStart(6)} s  ${r.file}  ${counts}${r.problem ? `: ${r.problem}` : ''}\n`);
    if (bad) {
      failed.push(r.file);
      write(`${r.output.map((l) => `    ${l}`).join('\n')}\n`);
    }
  };
  const endWorker = async (worker, ran) => {
    const end = await worker.finish(endTimeoutMs);
    live.delete(worker);
    for (const key of COUNT_KEYS) totals[key] += end.uncounted[key] ?? 0;
    if ((end.code === 0 && end.signal === null) || ran.some((f) => failed.includes(f))) return;
    failed.push(`the process that ran ${ran.join(', ')}`);
    write(`FAIL the process that ran ${ran.join(', ')} ended with ${end.signal ?? `status ${end.code}`} after its files:\n`);
    write(`${end.output.map((l) => `    ${l}`).join('\n')}\n`);
  };
  const lane = async () => {
    let shared;
    let sharedRan = [];
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      const own = solo.has(file);
      if (!own && shared === undefined) {
        shared = new Worker(root, env);
        live.add(shared);
        sharedRan = [];
      }
      const worker = own ? new Worker(root, env) : shared;
      if (own) live.add(worker);
      const result = { ...(await worker.run(resolve(root, file), fileTimeoutMs)), file };
      took[file] = result.ms;
      report(result);
      if (!own) sharedRan.push(file);
      if (own || result.lost) {
        await endWorker(worker, own ? [file] : sharedRan);
        if (!own) shared = undefined;
      }
    }
    if (shared !== undefined) await endWorker(shared, sharedRan);
  };
  const interrupted = () => {
    for (const w of live) w.kill();
    process.exit(130);
  };
  process.on('SIGINT', interrupted);
  await Promise.all(Array.from({ length: jobs }, lane));
  process.off('SIGINT', interrupted);
  const seconds = ((Date.now() - started) / 1000).toFixed(0);
  write(`\n${files.length} files in ${seconds} s: ${totals.pass} passed, ${totals.fail} failed, ${totals.skip} skipped, ${totals.todo} todo\n`);
  if (failed.length > 0) write(`failed: ${failed.join('; ')}\n`);
  if (timesFile !== undefined) writeTimes(timesFile, { ...record, ...took });
  return { totals, failed };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL('..', import.meta.url));
  // npm runs a script in the package's directory and says where it was called in INIT_CWD.
  const { jobs, files } = parseArgs(process.argv.slice(2), root, process.env.INIT_CWD ?? process.cwd(), unitTestFiles(root));
  process.chdir(root);
  // tap's own 30 s limit would count from a worker's start, not a file's: the runner times each
  // file (10 minutes, well above the slowest unit file, the body fuzzer: under a minute alone).
  const env = { ...process.env, CAPYBARA_TEST_UNIT: '1', TAP_TIMEOUT: '0' };
  // Under node_modules: not part of the tree, gone with a fresh install.
  const timesFile = join(root, 'node_modules', '.cache', 'capybara-test-unit', 'times.json');
  const { failed } = await runTestFiles({ root, files, jobs, env, timesFile });
  process.exit(failed.length > 0 ? 1 : 0);
}
