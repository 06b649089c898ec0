/**
 * `npm run test:unit`: every test that needs no Docker engine and no network namespace (which
 * takes root), for a machine that has neither; `npm run build` runs first (a few tests run the
 * built commands). A test file whose every test needs one of them says so at its top,
 * `await fileNeeds(t, 'engine')` (test/support/needs.ts), and is left out; every other test file
 * runs, with CAPYBARA_TEST_UNIT=1, under which a single engine test among unit tests skips with
 * its reason. A file is left out only by its own declaration, which test/scripts/test-unit.test.ts
 * checks against what the file uses, so no unit test can drop out unseen. Arguments go to tap.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
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

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const tap = join(root, 'node_modules', '.bin', 'tap');
  const run = spawnSync(tap, ['--disable-coverage', ...process.argv.slice(2), ...unitTestFiles(root)], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, CAPYBARA_TEST_UNIT: '1' },
  });
  process.exit(run.status ?? 1);
}
