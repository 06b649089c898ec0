/**
 * The rule of a folder kept in rooms: a few files at its top, the rest in rooms below it, each
 * room used by the others only through its index.ts and only in the direction its table gives,
 * never back up to a file at the top. Imports are read with TypeScript's own pre-processor
 * (import-graph.ts), so type-only and dynamic imports count and comments do not.
 */
import { readFileSync } from 'node:fs';
import type { Test } from 'tap';
import { join } from 'node:path';
import ts from 'typescript';
import { importsOf, ROOT, sourceFiles } from './import-graph.js';

export interface Rooms {
  /** The folder, as a repository path (`proxy`, `controller`). */
  readonly folder: string;
  /** Most files directly in the folder (the rest live in rooms). */
  readonly maxTopFiles: number;
  /** What each room may import from the other rooms. */
  readonly uses: Readonly<Record<string, readonly string[]>>;
  /**
   * Rooms outside the order: they may use any room, and no room may use them (the operator CLI,
   * which stands on the controller's package face).
   */
  readonly outside?: readonly string[];
  /** An import of a file at the top that is allowed anyway (`from` is the importer's room). */
  readonly mayUseTop?: (from: string, target: string) => boolean;
}

/** The rule's two cases, as subtests of `t`: the files at the top and the rooms' indexes, then every import. */
export function testRooms(t: Test, rooms: Rooms): void {
  t.test(`at most ${rooms.maxTopFiles} files directly in ${rooms.folder}/, and every room has an index.ts`, async (t) => {
    const top = topFiles(rooms);
    t.ok(top.length <= rooms.maxTopFiles, `${top.length} files: ${top.join(', ')}`);
    t.same(missingIndexes(rooms), [], 'each room has an index.ts');
    t.same(unnamedRooms(rooms), [], 'every room is in the table');
  });
  t.test('rooms import each other through index.ts, one way, and nothing imports back up', async (t) => {
    t.same(layoutProblems(rooms), [], 'every import follows the layout');
  });
}

/** The room a path is in, `top` for a file directly in the folder, undefined outside it. */
export function placeOf(rooms: Rooms, path: string): string | undefined {
  const parts = path.split('/');
  if (parts[0] !== rooms.folder) return undefined;
  return parts.length === 2 ? 'top' : parts[1];
}

/** Every import of the folder's sources that breaks the rule, in words. */
export function layoutProblems(rooms: Rooms): string[] {
  const problems: string[] = [];
  const outside = rooms.outside ?? [];
  for (const file of sourceFiles(rooms.folder)) {
    const from = placeOf(rooms, file)!;
    for (const target of importsOf(file)) {
      const to = placeOf(rooms, target);
      if (to === undefined) {
        // Another folder (common/, policy/): through its index.ts too.
        if (!target.endsWith('/index.ts')) problems.push(`${file} imports ${target}, not its folder's index.ts`);
        continue;
      }
      if (to === from) {
        if (from !== 'top' && target === `${rooms.folder}/${from}/index.ts`) problems.push(`${file} imports its own room's index.ts`);
        continue;
      }
      if (to === 'top') {
        if (!(rooms.mayUseTop?.(from, target) ?? false)) problems.push(`${file} imports ${target} at the top of ${rooms.folder}/`);
        continue;
      }
      if (target !== `${rooms.folder}/${to}/index.ts`) problems.push(`${file} imports ${target}, not ${to}/index.ts`);
      if (outside.includes(to)) problems.push(`${file} imports ${to}/, which no room may use`);
      else if (from !== 'top' && !outside.includes(from) && !(rooms.uses[from] ?? []).includes(to)) problems.push(`${file} (${from}/) imports ${to}/, which ${from}/ may not use`);
    }
  }
  return problems;
}

/** The rooms named in `uses` and `outside`, each checked to have an index.ts. */
export function missingIndexes(rooms: Rooms): string[] {
  const files = sourceFiles(rooms.folder);
  return [...Object.keys(rooms.uses), ...(rooms.outside ?? [])].filter((room) => !files.includes(`${rooms.folder}/${room}/index.ts`));
}

/** The files directly in the folder. */
export function topFiles(rooms: Rooms): string[] {
  return sourceFiles(rooms.folder).filter((f) => placeOf(rooms, f) === 'top');
}

/** Rooms on disk that the table does not name. */
export function unnamedRooms(rooms: Rooms): string[] {
  const named = new Set([...Object.keys(rooms.uses), ...(rooms.outside ?? [])]);
  return [...new Set(sourceFiles(rooms.folder).map((f) => placeOf(rooms, f)!))].filter((r) => r !== 'top' && !named.has(r));
}

/** Files of the folder longer than `maxLines`, with their length. */
export function longFiles(rooms: Rooms, maxLines: number): string[] {
  return sourceFiles(rooms.folder).flatMap((file) => {
    const lines = readFileSync(join(ROOT, file), 'utf8').split('\n').length - 1;
    return lines > maxLines ? [`${file}: ${lines} lines`] : [];
  });
}

/** Functions (declarations, methods, arrows, accessors) of the folder longer than `maxLines`, with where they start. */
export function longFunctions(rooms: Rooms, maxLines: number): string[] {
  const found: string[] = [];
  for (const file of sourceFiles(rooms.folder)) {
    const source = ts.createSourceFile(file, readFileSync(join(ROOT, file), 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined) {
        const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
        const lines = source.getLineAndCharacterOfPosition(node.end).line - first + 1;
        if (lines > maxLines) found.push(`${file}:${first + 1}: ${lines} lines`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}
