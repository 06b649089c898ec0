/**
 * The repository's import graph, read with TypeScript's own pre-processor, so that every form
 * counts (import, import type, export ... from, dynamic import()) and comments do not; and the
 * circles in it.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The TypeScript sources of a folder (or the one file) of the repository, as repository paths, sorted. */
export function sourceFiles(entry: string): string[] {
  const path = join(ROOT, entry);
  if (statSync(path).isFile()) return [entry];
  return readdirSync(path, { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.m?ts$/.test(f) && !f.endsWith('.d.ts'))
    .map((f) => posix.join(entry, f.split('\\').join('/')))
    .sort();
}

/** Relative imports of a repository file, resolved to repository paths of their sources (.js -> .ts). */
export function importsOf(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(join(ROOT, file), 'utf8'), true, true);
  return info.importedFiles
    .map((i) => i.fileName)
    .filter((spec) => spec.startsWith('.'))
    .map((spec) => posix.normalize(posix.join(posix.dirname(file), spec)).replace(/\.js$/, '.ts').replace(/\.mjs$/, '.mts'));
}

/** The strongly connected components with more than one file, or a file importing itself (Tarjan), each sorted. */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
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
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}
