/**
 * No import circle in the proxy and its pure layers (proxy/, policy/, common/), `import type`
 * included: a circle of types still ties two files into one concept, and the next value import
 * along it turns it into a load-order bug. Imports are read with TypeScript's own pre-processor, so
 * every form counts (import, import type, export ... from, dynamic import()).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import ts from 'typescript';

const root = fileURLToPath(new URL('../..', import.meta.url));
const FOLDERS = ['proxy', 'policy', 'common'];

function sourcesUnder(folder: string): string[] {
  return readdirSync(join(root, folder), { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.m?ts$/.test(f) && !f.endsWith('.d.ts'))
    .map((f) => join(root, folder, f));
}

/** The file a relative specifier names (`./x.js` is `./x.ts` in the sources), or why none. */
function resolveSpecifier(from: string, specifier: string): string {
  const target = resolve(dirname(from), specifier).replace(/\.js$/, '.ts').replace(/\.mjs$/, '.mts');
  if (!existsSync(target)) throw new Error(`${relative(root, from)} imports ${specifier}, which is no source file`);
  return target;
}

/** Every local import edge reachable from the folders' files, types included. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const queue = FOLDERS.flatMap(sourcesUnder);
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (graph.has(file)) continue;
    const imported = ts.preProcessFile(readFileSync(file, 'utf8'), true, true).importedFiles.map((f) => f.fileName);
    const local = imported.filter((s) => s.startsWith('.')).map((s) => resolveSpecifier(file, s));
    graph.set(file, local);
    queue.push(...local);
  }
  return graph;
}

/** The strongly connected components with more than one file, or a file importing itself (Tarjan). */
function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.map((f) => relative(root, f)).sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

t.test('no import circle in proxy/, policy/ and common/, type imports included', async (t) => {
  const graph = importGraph();
  const edges = [...graph.values()].reduce((n, e) => n + e.length, 0);
  // The reading itself is checked, so that a parser that found nothing cannot pass.
  t.ok(graph.get(join(root, 'proxy/server.ts'))?.includes(join(root, 'proxy/refusal.ts')), 'server.ts is seen importing refusal.ts');
  t.ok(graph.get(join(root, 'proxy/context.ts'))?.includes(join(root, 'proxy/refusal.ts')), 'a type-only import is an edge (context.ts to refusal.ts)');
  t.ok(edges > 50, `${edges} import edges read`);
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
