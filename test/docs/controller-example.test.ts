/**
 * The plugin-API example in docs/controller.md, run as written: its `js` block is saved inside
 * the package (so `import ... from 'capybara-sandbox-docker'` resolves to the built entry, as
 * for the host) and run with node against the real engine through the real socket proxy; what
 * it prints must be the output the docs show. The example reads its endpoint, network and id
 * from SANDBOX_* variables, which point it at this test's own.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sandboxTestEnv } from '../support/sandbox-env.js';
import { fileNeeds } from '../support/needs.js';

await fileNeeds(t, 'engine');

const root = fileURLToPath(new URL('../..', import.meta.url));
const doc = readFileSync(join(root, 'docs/controller.md'), 'utf8');

function exampleSection(): string {
  const start = doc.indexOf('\n## Example: the plugin API');
  if (start === -1) throw new Error('docs/controller.md has no "## Example: the plugin API" section');
  return doc.slice(start, doc.indexOf('\n## ', start + 1));
}

function block(text: string, lang: string): string {
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(text);
  if (m === null) throw new Error(`no ${lang} block in the example section`);
  return m[1] ?? '';
}

t.test('the plugin API example in docs/controller.md', { skip: existsSync(join(root, 'dist/index.mjs')) ? false : 'dist not built (npm run build)' }, async (t) => {
  const section = exampleSection();
  const code = block(section, 'js');
  const shown = block(section, 'text');
  for (const call of ['activate(', '.create(', '.exec(', '.readFile(', '.destroy(', 'image:', 'egress:', 'endpoint:']) t.match(code, call, `the example shows ${call}`);

  const s = await sandboxTestEnv(t);
  if (!s) return;
  const dir = join(root, 'dist', `doc-example-${s.env.runId}`);
  mkdirSync(dir, { recursive: true });
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'plugin-example.mjs');
  writeFileSync(file, code);
  const id = `${s.env.runId}-example`;
  const started = Date.now();
  const r = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [file], {
      cwd: dir,
      timeout: 120_000,
      env: { ...process.env, SANDBOX_ENDPOINT: s.proxy.endpoint, SANDBOX_NETWORK: s.sharedNetwork, SANDBOX_ID: id },
    }, (err, stdout, stderr) => resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr }));
  });
  t.comment(`the example ran in ${Date.now() - started} ms`);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, shown.replace('cap-plugin-example', `cap-${id}`), 'prints what the docs show');
  t.same(await s.labelled(`cap-${id}`), [], 'destroy left nothing');
});
