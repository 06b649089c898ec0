/**
 * The operator's tables (render.ts): one line per row whatever a cell holds. gc prints a
 * resource's name label in its SANDBOX column, and dockerd merges an image's labels into its
 * container's: a newline there printed a whole row of the image author's choosing.
 */
import t from 'tap';
import { table, terminalText } from '../../../controller/operator/render.js';

const cases: Array<{ name: string; cell: string; shown: string }> = [
  { name: 'a newline, which forged a row', cell: 'cap-x\nremove  volume  cap-ws.important', shown: 'cap-x\\u000aremove  volume  cap-ws.important' },
  { name: 'a carriage return, which overwrote the row on a terminal', cell: 'cap-x\rkeep', shown: 'cap-x\\u000dkeep' },
  { name: 'a tab, which moved the columns', cell: 'cap-x\tkept', shown: 'cap-x\\u0009kept' },
  { name: 'a line separator', cell: 'cap-x\u2028y', shown: 'cap-x\\u2028y' },
  { name: 'plain text, unchanged', cell: 'cap-x', shown: 'cap-x' },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const out = terminalText(table(['ACTION', 'SANDBOX', 'AGE'], [['keep', c.cell, '5s'], ['remove', 'cap-y', '9s']]));
    const lines = out.split('\n');
    t.equal(lines.length, 4, 'a header, two rows and the final newline');
    t.ok(lines[1]?.startsWith(`keep    ${c.shown}`), 'the cell shown escaped, on its row');
    t.ok(lines[1]?.endsWith('  5s'), 'its row whole');
    t.match(lines[2], /^remove {2}cap-y/);
  });
}
