/**
 * Every `docs/<name>.md` that a source file, config, script or document names exists, so a
 * message like doctor's "see docs/..." never sends an operator to a file that is not there.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const root = fileURLToPath(new URL('../..', import.meta.url));

t.test('named docs exist', async (t) => {
  const files = execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' })
    .split('\n')
    .filter((f) => /\.(ts|mts|md|cfg|map|pat|sh|yaml|json)$|Dockerfile$/.test(f) && !f.startsWith('test/docs/') && f !== 'package-lock.json');
  const named = new Map<string, string>();
  for (const file of files) {
    for (const m of readFileSync(join(root, file), 'utf8').matchAll(/\bdocs\/[a-z0-9-]+\.md\b/g)) named.set(m[0], file);
  }
  t.ok(named.size > 0, 'some docs are named');
  for (const [doc, by] of named) t.ok(existsSync(join(root, doc)), `${doc} (named in ${by}) exists`);
});
