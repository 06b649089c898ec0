/**
 * The proxy's layout, as the tree shows it: the entry, the wiring (server.ts), the CLI and its
 * configuration at the top, and rooms below, each used by the others only through its index.ts,
 * in one direction (budget and record at the bottom, the front that routes a connection at the top), never back up to
 * a file at the top. The rule is test/support/rooms.ts's; circles are import-cycles.test.ts's.
 */
import t from 'tap';
import { layoutProblems, longFiles, longFunctions, placeOf, testRooms, type Rooms } from '../support/rooms.js';
/** Most lines in one file, and in one function: past them, a part wants a room or a name of its own. */
const MAX_FILE_LINES = 300;
const MAX_FUNCTION_LINES = 80;

const ROOMS: Rooms = {
  folder: 'proxy',
  maxTopFiles: 8,
  uses: {
    budget: [],
    record: ['budget'],
    upstream: ['budget'],
    dns: ['budget', 'record', 'upstream'],
    admission: ['budget', 'record', 'upstream', 'dns'],
    secrets: [],
    http: ['budget', 'record', 'upstream', 'admission', 'secrets'],
    tls: ['record'],
    inspect: ['budget', 'record', 'upstream', 'admission'],
    tunnel: ['budget', 'record', 'upstream', 'admission', 'http', 'tls'],
    transparent: ['budget', 'record', 'dns', 'admission', 'http', 'tls', 'tunnel'],
    front: ['budget', 'record', 'upstream', 'admission', 'http', 'tunnel', 'transparent'],
    report: ['record'],
    tenants: ['record', 'admission', 'dns'],
    launch: [],
  },
};

testRooms(t, ROOMS);

t.test(`no file over ${MAX_FILE_LINES} lines, no function over ${MAX_FUNCTION_LINES}`, async (t) => {
  t.same(longFiles(ROOMS, MAX_FILE_LINES), [], 'every file');
  t.same(longFunctions(ROOMS, MAX_FUNCTION_LINES), [], 'every function, method and arrow');
  // The measures themselves: the longest file and function are found at a lower bound.
  t.ok(longFiles(ROOMS, 100).length > 0 && longFunctions(ROOMS, 40).length > 0, 'the measures see long ones');
});

t.test('the rule sees a break', async (t) => {
  // A room that may use nothing, reading one that exists: the reader must find that import.
  const strict: Rooms = { ...ROOMS, uses: { ...ROOMS.uses, tunnel: [] } };
  t.ok(layoutProblems(strict).some((p) => p.startsWith('proxy/tunnel/tunnel.ts (tunnel/) imports')), 'tunnel/ using other rooms is seen');
  t.equal(placeOf(ROOMS, 'proxy/server.ts'), 'top');
  t.equal(placeOf(ROOMS, 'proxy/tls/tls-guard.ts'), 'tls');
});
