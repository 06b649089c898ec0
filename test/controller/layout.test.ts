/**
 * The controller's layout, as the tree shows it: a few files at the top (the provider, the
 * package face, the plugin manifest) and the rooms below, each used by the others only through
 * its index.ts, in one direction (spec <- docker <- exec <- sandbox), never back up to a file at
 * the top. Imports are read with TypeScript's own pre-processor (test/support/import-graph.ts),
 * so type-only and dynamic imports count and comments do not; import circles are
 * test/proxy/import-cycles.test.ts's, for every folder.
 */
import t from 'tap';
import ts from 'typescript';
import { importsOf, sourceFiles } from '../support/import-graph.js';

/** Most files directly in controller/ (the rest live in rooms). */
const MAX_TOP_FILES = 12;

/** What each room may import from the other rooms (always through their index.ts). */
const ROOM_USES = {
  spec: [],
  docker: ['spec'],
  exec: ['spec', 'docker'],
  sandbox: ['spec', 'docker', 'exec'],
} as const satisfies Record<string, readonly string[]>;
type Room = keyof typeof ROOM_USES;
const ROOMS = Object.keys(ROOM_USES) as Room[];

/** The room a controller path is in, `top` for controller/*.ts, `operator`, or undefined outside. */
function placeOf(path: string): Room | 'top' | 'operator' | undefined {
  const parts = path.split('/');
  if (parts[0] !== 'controller') return undefined;
  if (parts.length === 2) return 'top';
  return parts[1] as Room | 'operator';
}

const controllerFiles = sourceFiles('controller');

t.test(`at most ${MAX_TOP_FILES} files directly in controller/`, async (t) => {
  const top = controllerFiles.filter((f) => placeOf(f) === 'top');
  t.ok(top.length <= MAX_TOP_FILES, `${top.length} files: ${top.join(', ')}`);
  for (const room of ROOMS) t.ok(controllerFiles.includes(`controller/${room}/index.ts`), `${room}/ has an index.ts`);
});

t.test('rooms import each other through index.ts, one way, and nothing imports back up', async (t) => {
  const problems: string[] = [];
  for (const file of controllerFiles) {
    const from = placeOf(file);
    for (const target of importsOf(file)) {
      const to = placeOf(target);
      if (to === undefined) {
        // common/, policy/: through their index.ts too.
        if (!target.endsWith('/index.ts')) problems.push(`${file} imports ${target}, not its folder's index.ts`);
        continue;
      }
      if (to === from) {
        if (from !== 'top' && target === `controller/${from}/index.ts`) problems.push(`${file} imports its own room's index.ts`);
        continue;
      }
      if (to === 'top') {
        // Only the operator CLI uses the provider, and only through the package face.
        if (!(from === 'operator' && target === 'controller/index.ts')) problems.push(`${file} imports ${target} at the top of controller/`);
        continue;
      }
      if (target !== `controller/${to}/index.ts`) problems.push(`${file} imports ${target}, not ${to}/index.ts`);
      if (to === 'operator') problems.push(`${file} imports the operator CLI`);
      else if (from !== undefined && from !== 'top' && from !== 'operator' && !(ROOM_USES[from] as readonly string[]).includes(to)) {
        problems.push(`${file} (${from}/) imports ${to}/, which ${from}/ may not use`);
      }
    }
  }
  t.same(problems, [], 'every import follows the layout');
});

t.test('the layout rules catch what they claim to', async (t) => {
  // The import reader itself: a type-only import counts, a commented one does not.
  const info = ts.preProcessFile("// import { x } from './a.js';\nimport type { Y } from './b.js';\nexport { z } from './c.js';\n", true, true);
  t.same(info.importedFiles.map((i) => i.fileName), ['./b.js', './c.js']);
  t.equal(placeOf('controller/provider.ts'), 'top');
  t.equal(placeOf('controller/spec/names.ts'), 'spec');
  t.equal(placeOf('policy/index.ts'), undefined);
});
