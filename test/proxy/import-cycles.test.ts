/**
 * No import circle anywhere in the sources (proxy/, policy/, common/, controller/, bench/ and the
 * package entry), `import type` included: a circle of types still ties two files into one concept,
 * and the next value import along it turns it into a load-order bug.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { circles, importsOf, ROOT, sourceFiles } from '../support/import-graph.js';

const ENTRIES = ['proxy', 'policy', 'common', 'controller', 'bench', 'index.mts'];

t.test('no import circle in the sources, type imports included', async (t) => {
  const files = ENTRIES.flatMap(sourceFiles);
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  const missing = [...graph].flatMap(([file, deps]) => deps.filter((d) => !existsSync(join(ROOT, d))).map((d) => `${file} imports ${d}, which is no source file`));
  t.same(missing, [], 'every relative import names a source file');
  const edges = [...graph.values()].reduce((n, e) => n + e.length, 0);
  // The reading itself is checked, so that a parser that found nothing cannot pass.
  t.ok(graph.get('proxy/server.ts')?.includes('proxy/record/index.ts'), 'server.ts is seen importing record/index.ts');
  t.ok(graph.get('proxy/admission/context.ts')?.includes('proxy/record/index.ts'), 'a type-only import is an edge (context.ts to record/index.ts)');
  t.ok(edges > 100, `${edges} import edges read in ${files.length} files`);
  t.same(circles(graph), [], 'every circle, as the files in it');
});

t.test('the circle finder finds circles', async (t) => {
  const graph = new Map([
    ['/a', ['/b']],
    ['/b', ['/c']],
    ['/c', ['/a', '/d']],
    ['/d', ['/d']],
    ['/e', ['/a']],
  ]);
  t.same(circles(graph).map((c) => c.length).sort(), [1, 3]);
});
