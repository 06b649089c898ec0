/**
 * The reason catalog and the README's refusal table say the same thing: every code a client or
 * an operator can meet is documented with its status, and the table names no code that does not
 * exist. Codes are a public contract, so this is what keeps them honest.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { REASONS } from '../../policy/index.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const table = new Map([...readme.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1]!, Number(m[2])]));

t.test('every reason is in the README table with its status', async (t) => {
  for (const [code, { status }] of Object.entries(REASONS)) t.equal(table.get(code), status, code);
});

t.test('the README table names only real reasons', async (t) => {
  for (const code of table.keys()) t.ok(Object.hasOwn(REASONS, code), code);
});
