/**
 * The controller's layout, as the tree shows it: a few files at the top (the provider, the
 * package face, the plugin manifest) and the rooms below, each used by the others only through
 * its index.ts, in one direction (spec <- docker <- exec <- sandbox), never back up to a file at
 * the top; the operator CLI stands on the package face. The rule is test/support/rooms.ts's;
 * import circles are test/proxy/import-cycles.test.ts's, for every folder.
 */
import t from 'tap';
import ts from 'typescript';
import { placeOf, testRooms, type Rooms } from '../support/rooms.js';

const ROOMS: Rooms = {
  folder: 'controller',
  maxTopFiles: 12,
  uses: {
    spec: [],
    docker: ['spec'],
    exec: ['spec', 'docker'],
    sandbox: ['spec', 'docker', 'exec'],
  },
  outside: ['operator'],
  // Only the operator CLI uses the provider, and only through the package face.
  mayUseTop: (from, target) => from === 'operator' && target === 'controller/index.ts',
};

testRooms(t, ROOMS);

t.test('the layout rules catch what they claim to', async (t) => {
  // The import reader itself: a type-only import counts, a commented one does not.
  const info = ts.preProcessFile("// import { x } from './a.js';\nimport type { Y } from './b.js';\nexport { z } from './c.js';\n", true, true);
  t.same(info.importedFiles.map((i) => i.fileName), ['./b.js', './c.js']);
  t.equal(placeOf(ROOMS, 'controller/provider.ts'), 'top');
  t.equal(placeOf(ROOMS, 'controller/spec/names.ts'), 'spec');
  t.equal(placeOf(ROOMS, 'policy/index.ts'), undefined);
});
