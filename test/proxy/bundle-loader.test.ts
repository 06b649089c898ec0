/**
 * The egress command's launcher (proxy/launch/bundle-loader.ts): a bundle runs from the code
 * cache written for it, and from its source when the cache is missing, of another bundle, or
 * not V8's; and the command as built (`npm run build`) starts from its own cache.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { codeCacheOf } from '../../proxy/launch/index.js';
import { plainNode } from '../support/plain-node.js';

const LOADER = fileURLToPath(new URL('../../dist/proxy/launch/bundle-loader.js', import.meta.url));
const BUILT = fileURLToPath(new URL('../../dist/proxy/capybara-egress.cjs', import.meta.url));
const POLICY = fileURLToPath(new URL('../../policy/default-policy.yaml', import.meta.url));

/** A bundle that prints its arguments, its file and the line an error is thrown on (line 3). */
const bundle = (word: string): string => `#!/usr/bin/env node
const seen = { word: ${JSON.stringify(word)}, args: process.argv.slice(2), file: __filename, sep: require('node:path').sep };
try { throw new Error('here'); } catch (err) { seen.line = Number(/:(\\d+):\\d+\\)?$/m.exec(err.stack.split('\\n')[1])[1]); }
process.stdout.write(JSON.stringify(seen) + '\\n');
`;

interface Run {
  readonly out: Record<string, unknown> | undefined;
  readonly fromCache: boolean | undefined;
  readonly stderr: string;
}

/** Runs `file` through the built loader in a plain node: `write` writes its cache, else it runs from it. */
function run(file: string, how: 'run' | 'write', args: readonly string[] = []): Run {
  const script = how === 'write'
    ? `import { writeCodeCache } from ${JSON.stringify(LOADER)}; writeCodeCache(${JSON.stringify(file)}, ${JSON.stringify(args)});`
    : `import { runBundle } from ${JSON.stringify(LOADER)}; process.argv = [process.execPath, 'capybara-egress.mjs', ...${JSON.stringify(args)}]; process.stderr.write('fromCache=' + runBundle(${JSON.stringify(file)}) + '\\n');`;
  const [cmd, argv] = plainNode('--input-type=module', ['-e', script]);
  const res = spawnSync(cmd, argv, { encoding: 'utf8', timeout: 30_000 });
  const line = res.stdout.split('\n').find((l) => l.startsWith('{'));
  const flag = /fromCache=(true|false)/.exec(res.stderr)?.[1];
  return { out: line === undefined ? undefined : (JSON.parse(line) as Record<string, unknown>), fromCache: flag === undefined ? undefined : flag === 'true', stderr: res.stderr };
}

t.test('a bundle runs from the cache written for it, and from its source otherwise', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capybara-bundle-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'command.cjs');
  writeFileSync(file, bundle('first'));

  const fresh = run(file, 'run', ['a', 'b']);
  t.same(fresh.out, { word: 'first', args: ['a', 'b'], file, sep: '/', line: 3 }, 'no cache: it runs as Node runs a CommonJS main, `#!` line and all, lines where they were');
  t.equal(fresh.fromCache, false);

  t.same(run(file, 'write', ['c']).out, { word: 'first', args: ['c'], file, sep: '/', line: 3 }, 'writing the cache runs it with the arguments given');
  const cached = run(file, 'run');
  t.equal(cached.fromCache, true, 'V8 takes the cache written for this very bundle');
  t.match(cached.out, { word: 'first', line: 3 });

  // Another bundle of the same length: V8 would check only the length, and run the old code.
  writeFileSync(file, bundle('other'));
  const other = run(file, 'run');
  t.equal(other.fromCache, false, 'a cache made from another bundle is not used, even of the same length');
  t.match(other.out, { word: 'other' }, 'the bundle as it is now runs');

  run(file, 'write');
  const bytes = readFileSync(codeCacheOf(file));
  const broken = Buffer.from(bytes);
  broken.fill(0x5a, 40, 200);
  writeFileSync(codeCacheOf(file), broken);
  const refused = run(file, 'run');
  t.equal(refused.fromCache, false, 'a cache V8 refuses (damaged here) is not used');
  t.match(refused.out, { word: 'other' });
  writeFileSync(codeCacheOf(file), bytes.subarray(0, 20));
  t.equal(run(file, 'run').fromCache, false, 'nor one too short to name its bundle');
  t.match(run(file, 'run').out, { word: 'other' });
});

t.test('the egress command as built starts from its own code cache', async (t) => {
  const res = run(BUILT, 'run', ['check', POLICY]);
  t.equal(res.fromCache, true, `npm run build wrote a cache this node takes (${res.stderr.trim()})`);
});
