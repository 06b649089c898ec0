/**
 * Every test file is classified, and truly: `npm run test:unit` (scripts/test-unit.mjs) leaves a
 * file out only when the file declares, at its top, that every test in it needs a Docker engine
 * or network namespaces; a declaration is checked against what the file uses, so a unit test
 * cannot be declared away, and a file that makes namespaces cannot slip into the unit run.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import ts from 'typescript';
import { declaredNeed, NEEDS, runTestFiles, soloReason, testFiles, unitTestFiles } from '../../scripts/test-unit.mjs';

const root = fileURLToPath(new URL('../..', import.meta.url));
/** The support module every engine test goes through (it skips, fails or gives the engine). */
const ENGINE_SUPPORT = 'test/support/docker.ts';

/** The test-local files a test file imports, directly or through other test files. */
function testImports(file: string): Set<string> {
  const seen = new Set<string>();
  const queue = [file];
  while (queue.length > 0) {
    const at = queue.pop()!;
    const text = readFileSync(join(root, at), 'utf8');
    for (const { fileName } of ts.preProcessFile(text, true, true).importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = relative(root, resolve(dirname(join(root, at)), fileName)).replace(/\.js$/, '.ts');
      if (!target.startsWith('test/') || seen.has(target)) continue;
      seen.add(target);
      queue.push(target);
    }
  }
  return seen;
}

const files = testFiles(root);
const needOf = new Map(files.map((f) => [f, declaredNeed(readFileSync(join(root, f), 'utf8')) as string | undefined]));

t.test('every test file is a unit file or declares what it needs', async (t) => {
  t.ok(files.length > 40, `${files.length} test files found`);
  t.ok(files.includes('test/scripts/test-unit.test.ts'), 'this file among them');
  for (const file of files) t.ok(needOf.get(file) === undefined || NEEDS.includes(needOf.get(file)!), `${file}: ${needOf.get(file) ?? 'unit'}`);
  t.same(unitTestFiles(root), files.filter((f) => needOf.get(f) === undefined), 'the unit run is exactly the files that declare no need');
  t.ok(unitTestFiles(root).length > 30, 'most files are unit files');
});

t.test('a declared need is one the file has', async (t) => {
  for (const [file, need] of needOf) {
    if (need === 'engine') t.ok(testImports(file).has(ENGINE_SUPPORT), `${file} declares the engine and reaches it through ${ENGINE_SUPPORT}`);
    if (need === 'netns') t.match(readFileSync(join(root, file), 'utf8'), /spawnSync\('unshare', \['-n'/, `${file} declares namespaces and makes one`);
    if (need === 'pidns') t.match(readFileSync(join(root, file), 'utf8'), /spawnSync\('unshare', \['-fp'/, `${file} declares a PID namespace and makes one`);
  }
});

t.test('a file that makes namespaces declares them', async (t) => {
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    // A unit file may hold one namespace test, which leaves the unit run first.
    // A mount namespace takes root as a network namespace does: it leaves the unit run as 'netns'.
    for (const [flags, need] of [['-n', 'netns'], ['-m', 'netns'], ['-fp', 'pidns']] as const) {
      if (!new RegExp(`(spawn|execFile)(Sync)?\\('unshare', \\['${flags}'`).test(text)) continue;
      t.ok(needOf.get(file) === need || text.includes(`leftOutOfUnitRun(t, '${need}')`), `${file} runs unshare ${flags} and declares ${need}`);
    }
    t.notMatch(text.replace(/(spawn|execFile)(Sync)?\('unshare', \['(-n|-m|-fp)'/g, ''), /(spawn|execFile)(Sync)?\('unshare'/, `${file}: every unshare is one of the known kinds`);
  }
});

t.test('a unit file that reaches the engine goes through the engine support, which skips in the unit run', async (t) => {
  // Such a file mixes unit tests with engine tests; its engine tests call dockerTest (directly or
  // through sandbox-env.ts), which skips them under CAPYBARA_TEST_UNIT, CI or not.
  const support = readFileSync(join(root, ENGINE_SUPPORT), 'utf8');
  t.match(support, /if \(leftOutOfUnitRun\(t, 'engine'\)\) return null;/, 'dockerTest skips in the unit run');
  for (const file of unitTestFiles(root)) {
    const text = readFileSync(join(root, file), 'utf8');
    t.notMatch(text, /new Docker\(|(execFile|spawn)(Sync)?\('docker'/, `${file}: no engine client of its own`);
  }
});

t.test('the declaration reader refuses what it cannot read', async (t) => {
  t.equal(declaredNeed("import t from 'tap';\nt.test('x', () => {});\n"), undefined);
  t.equal(declaredNeed("import { fileNeeds } from '../support/needs.js';\n\nawait fileNeeds(t, 'engine');\n"), 'engine');
  t.throws(() => declaredNeed("await fileNeeds(t, 'gpu');\n"), /unknown need 'gpu'/);
  t.throws(() => declaredNeed("if (x) await fileNeeds(t, 'engine');\n"), /not written as/);
  t.throws(() => declaredNeed("const need = 'engine';\nawait fileNeeds(t, need);\n"), /not written as/);
  t.throws(() => declaredNeed("await fileNeeds(t, 'engine');\nawait fileNeeds(t, 'netns');\n"), /more than one/);
});

t.test('npm run test:unit runs the unit files, with the engine tests among them skipped', async (t) => {
  const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  t.match(scripts['test:unit'], /^npm run build --silent && npm run typecheck --silent && node scripts\/test-unit\.mjs$/);
  t.match(readFileSync(join(root, 'scripts/test-unit.mjs'), 'utf8'), /CAPYBARA_TEST_UNIT: '1'/);
  t.match(readFileSync(join(root, 'test/support/needs.ts'), 'utf8'), /const UNIT_RUN = 'CAPYBARA_TEST_UNIT';/);
});

t.test('both test commands check the types of every test file first', async (t) => {
  const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  t.equal(scripts.typecheck, 'tsc -p tsconfig.test.json');
  t.match(scripts.test, /^npm run build --silent && npm run typecheck --silent && tap$/);
  const config = ts.getParsedCommandLineOfConfigFile(join(root, 'tsconfig.test.json'), {}, {
    ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')); },
  });
  const checked = new Set((config?.fileNames ?? []).map((f) => relative(root, f)));
  const missing = [...testFiles(root), 'test/support/docker.ts', 'test/haproxy/lua-checker.ts'].filter((f) => !checked.has(f));
  t.same(missing, [], 'every test file and the support code are in the checked program');
  t.equal(config?.options.strict, true, 'as strict as the sources');
});

t.test('a file shares a process only when it touches nothing the files would share', async (t) => {
  const head = "import t, { type Test } from 'tap';\n";
  const shares = [
    "t.test('a', async (t) => { t.teardown(() => {}); t.jobs = 2; t.beforeEach(() => {}); });",
    "t.skip('b'); t.todo('c'); t.comment('d');",
    "const helper = (t: Test) => t.teardown(() => {}); t.test('e', async (t) => helper(t));",
    "function f(t: Test) { t.plan(1); t.pass('x'); } t.test('f', f);",
    "const seed = process.env.SEED ?? '1'; const env = { ...process.env, X: '1' }; const v = process.env['Y'];",
    "for (const n of [1, 2]) t.test(`g${n}`, async () => {});",
    "const o = { t: 1 }; const p = o.t;",
    "t.teardown(() => {}); function close() { t.teardown(() => {}); }",
    "t.equal(1, 1); t.ok(true);",
    "const names = Object.keys(process.env); const off = !process.env.X;",
  ];
  for (const body of shares) t.equal(soloReason(head + body), undefined, body);
  const solo: Array<[string, RegExp]> = [
    ["t.jobs = 3;", /uses tap's root: t\.jobs/],
    ["t.plan(2);", /t\.plan/],
    ["t.beforeEach(() => {});", /t\.beforeEach/],
    ["t.setTimeout(1000);", /t\.setTimeout/],
    ["function close() { t.afterEach(() => {}); }", /t\.afterEach/],
    ["const f = () => t.before(() => {});", /t\.before/],
    ["helper(t);", /helper\(t\)/],
    ["const { test } = t;", /uses tap's root/],
    ["t.test('x', async () => { t.plan(1); });", /t\.plan/],
    ["process.on('uncaughtException', () => {});", /process\.on/],
    ["t.test('x', async () => { process.exitCode = 1; });", /process\.exitCode/],
    ["process.chdir('/');", /process\.chdir/],
    ["process.env.X = '1';", /process\.env other than reading it/],
    ["delete process.env.X;", /process\.env other than reading it/],
    ["process.env.N++;", /process\.env other than reading it/],
    ["Object.assign(process.env, { X: '1' });", /process\.env other than reading it/],
    ["t.test('x', async () => { const t = 1; });", /declares another t/],
  ];
  for (const [body, reason] of solo) t.match(soloReason(head + body), reason, body);
  t.match(soloReason("import { test } from 'tap';\ntest('x', () => {});\n"), /other than its root/);
  t.equal(soloReason("import tap from 'tap';\ntap.test('x', async (t) => { t.teardown(() => {}); });\n"), undefined, 'the root under another name');
  t.match(soloReason("import tap from 'tap';\ntap.jobs = 2;\n"), /tap\.jobs/);
});

/** The environment npm run test:unit gives its processes, without what tap set for this one. */
function runnerEnv(): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TAP') && k !== 'NODE_OPTIONS'));
  return { ...env, TAP_TIMEOUT: '0' };
}

/**
 * A directory for test files of the runner's own tests, under node_modules so that they find tap
 * as the repository's tests do, and `file(name, body)` writing one (tap's root imported as t).
 */
function testFilesDir(t: Test): { dir: string; file: (name: string, body: string) => string } {
  const cache = join(root, 'node_modules', '.cache');
  mkdirSync(cache, { recursive: true });
  const dir = mkdtempSync(join(cache, 'capybara-test-unit-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, body: string): string => {
    writeFileSync(join(dir, name), `import t from 'tap';\n${body}\n`);
    return join(dir, name);
  };
  return { dir, file };
}

t.test('the runner: shared processes keep each file\'s result apart and run its teardowns before the next, and a file of its own keeps its root', async (t) => {
  const { dir, file } = testFilesDir(t);
  const torn = join(dir, 'torn-down');
  const files = [
    file('a.test.mjs', "t.test('a1', async (t) => { t.pass('a1 passes'); t.pass('a1 again'); });"),
    file('b.test.mjs', "t.test('b1', async (t) => { t.pass('b1 passes'); t.equal(1, 2, 'b1 fails'); });"),
    file('c.test.mjs', "t.test('c1', async (t) => { t.plan(0, 'skipped whole'); });\nt.test('c2', async (t) => { t.pass('c2 passes'); });"),
    file('d.test.mjs', `import { writeFileSync } from 'node:fs';\nt.teardown(() => writeFileSync(${JSON.stringify(torn)}, 'x'));\nt.test('d1', async (t) => { t.pass('d1 passes'); });`),
    file('e.test.mjs', `import { existsSync } from 'node:fs';\nt.test('e1', async (t) => { t.ok(existsSync(${JSON.stringify(torn)}), 'the teardown of the file before ran'); });`),
    file('f.test.mjs', "t.jobs = 2;\nt.test('f1', async (t) => { t.pass('f1 passes'); });\nt.test('f2', async (t) => { t.pass('f2 passes'); });"),
  ];
  let out = '';
  const env = runnerEnv();
  const run = await runTestFiles({ root, files, jobs: 1, env, write: (s: string) => { out += s; } });
  const lineOf = (f: string): string => out.split('\n').find((l) => l.includes(f)) ?? '';
  t.same(run.failed, [files[1]], 'only the failing file failed');
  t.same(run.totals, { pass: 8, fail: 1, skip: 1, todo: 0 }, 'every assertion counted once, the whole skipped test too');
  t.match(out, /1 in a process of their own/, 'the file that sets its root up ran alone');
  t.match(lineOf(files[5]!), /^ok .* 2 pass$/);
  t.match(lineOf(files[0]!), /^ok .* 2 pass$/);
  t.match(lineOf(files[1]!), /^FAIL .* 1 pass, 1 fail$/);
  t.match(lineOf(files[4]!), /^ok .* 1 pass$/, 'a file after a failing one in the same process is its own, and saw the teardown before it');
  t.match(out, /b1 fails/, "the failing file's output is shown");
  t.notMatch(out, /a1 passes/, "a passing file's output is not");
});

t.test('the runner: a file that hangs is killed at its deadline, one that ends its process is a failure, and the files after them run', async (t) => {
  const { file } = testFilesDir(t);
  const files = [
    file('hang.test.mjs', "t.test('hangs', async () => { await new Promise((r) => setTimeout(r, 600_000)); });"),
    file('after-hang.test.mjs', "t.test('after', async (t) => { t.pass('runs after the hung file'); });"),
    file('exits.test.mjs', "t.test('exits', async () => { process.exit(3); });"),
    file('after-exit.test.mjs', "t.test('after', async (t) => { t.pass('runs after the exit'); });"),
  ];
  let out = '';
  const env = runnerEnv();
  const started = Date.now();
  const run = await runTestFiles({ root, files, jobs: 1, env, fileTimeoutMs: 10_000, write: (s: string) => { out += s; } });
  t.ok(Date.now() - started < 60_000, 'the hung file did not hold the run');
  t.same(run.failed, [files[2], files[0]], 'the file that ended its process (run alone, first) and the hung file failed');
  t.match(out, /hang\.test\.mjs .*did not end within 10 s \(killed\)/);
  t.match(out, /exits\.test\.mjs .*its process ended \(status \d+\) before its tests did/);
  t.equal(run.totals.pass, 2, 'the files after them passed');
});

t.test('the runner records each file\'s time and starts the longest first next time', async (t) => {
  const { dir, file } = testFilesDir(t);
  const files = ['a', 'b', 'c'].map((n) => file(`${n}.test.mjs`, `t.test('${n}', async (t) => { t.pass('${n}'); });`));
  const timesFile = join(dir, 'times', 'times.json');
  const order = async (): Promise<string[]> => {
    let out = '';
    await runTestFiles({ root, files, jobs: 1, env: runnerEnv(), timesFile, write: (s: string) => { out += s; } });
    return out.split('\n').filter((l) => l.startsWith('ok ')).map((l) => /([abc])\.test\.mjs/.exec(l)?.[1] ?? '?');
  };
  t.same(await order(), ['a', 'b', 'c'], 'with no record: in the given order');
  const record = JSON.parse(readFileSync(timesFile, 'utf8')) as Record<string, number>;
  t.same(Object.keys(record).sort(), [...files].sort(), 'every file timed');
  writeFileSync(timesFile, JSON.stringify({ [files[0]!]: 5, [files[1]!]: 900 }));
  t.same(await order(), ['c', 'b', 'a'], 'then the longest first, a file with no time counted longest');
  writeFileSync(timesFile, '{not json');
  t.same(await order(), ['a', 'b', 'c'], 'a record it cannot read is no record');
});
