/**
 * Every test file is classified, and truly: `npm run test:unit` (scripts/test-unit.mjs) leaves a
 * file out only when the file declares, at its top, that every test in it needs a Docker engine
 * or network namespaces; a declaration is checked against what the file uses, so a unit test
 * cannot be declared away, and a file that makes namespaces cannot slip into the unit run.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import ts from 'typescript';
import { declaredNeed, NEEDS, testFiles, unitTestFiles } from '../../scripts/test-unit.mjs';

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
  t.match(scripts['test:unit'], /^npm run build --silent && node scripts\/test-unit\.mjs$/);
  t.match(readFileSync(join(root, 'scripts/test-unit.mjs'), 'utf8'), /CAPYBARA_TEST_UNIT: '1'/);
  t.match(readFileSync(join(root, 'test/support/needs.ts'), 'utf8'), /const UNIT_RUN = 'CAPYBARA_TEST_UNIT';/);
});
