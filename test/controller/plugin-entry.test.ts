/**
 * The plugin as the Capybara host loads it: plugin.json names the entry, the entry's default
 * export activates with a deployment config and returns the sandbox@1 provider. Runs against the
 * built entry (dist/index.mjs), which `npm test` compiles first.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import t from 'tap';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const manifest = JSON.parse(readFileSync(path.join(root, '.capybara-plugin', 'plugin.json'), 'utf8')) as {
  extension: { entry: string; manifest: { provides: string[] } };
};

t.test('the entry named by plugin.json activates a sandbox@1 provider', async (t) => {
  t.same(manifest.extension.manifest.provides, ['sandbox@1']);
  const entry = (await import(pathToFileURL(path.join(root, manifest.extension.entry)).href)) as {
    default: (config: unknown) => Record<string, Record<string, unknown>>;
    createDockerSandbox: unknown;
  };
  t.type(entry.default, 'function');
  t.type(entry.createDockerSandbox, 'function');
  const provided = entry.default({ endpoint: 'unix:///nonexistent/docker.sock' });
  t.same(Object.keys(provided), ['sandbox@1']);
  const provider = provided['sandbox@1'] ?? {};
  t.equal(provider.concurrentExec, true);
  for (const op of ['create', 'suspend', 'resume', 'destroy', 'destroyByName', 'exec', 'readFile', 'writeFile', 'stat', 'killAll', 'killTagged', 'destroyWorkspace']) {
    t.type(provider[op], 'function', op);
  }
  t.throws(() => entry.default({ endpoint: 'unix:///x', allowOpenEgres: true }), /allowOpenEgres/, 'an unknown key is named');
});
