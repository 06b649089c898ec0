/**
 * README tables that restate the source stay equal to it: the egress proxy's flag table (every
 * flag, its environment twin and its default, from proxy/config.ts), and the Layout's lists of
 * the files in proxy/ and policy/ (every file named, no file named that is gone).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { EGRESS_ENV } from '../../common/index.js';
import { OPTIONS, TEST_HOSTS_ENV } from '../../proxy/config.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** The rows of the first table after `heading`, as cells (the header and divider left out). */
function tableAfter(heading: string): string[][] {
  const at = readme.indexOf(`\n${heading}\n`);
  if (at === -1) throw new Error(`README has no heading "${heading}"`);
  const lines = readme.slice(at).split('\n');
  const first = lines.findIndex((l) => l.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((c) => c.trim()));
  }
  return rows;
}

/** The default an option's help text states, as the README's table would write it. */
function helpDefault(help: string): string | undefined {
  const stated = /[(;] ?default ([^)]*)\)/.exec(help)?.[1];
  return stated?.split(/: | /)[0];
}

t.test('the egress flag table is the proxy\'s options', async (t) => {
  const rows = tableAfter('### Flags and environment variables');
  const byFlag = new Map<string, string[]>();
  for (const row of rows) {
    const flag = /^`--([a-z-]+)/.exec(row[0] ?? '')?.[1];
    if (flag === undefined) {
      t.equal(row[0], '', 'a row without a flag is an environment variable only');
      // The only ones: the test hosts, and the inline CA (a key in argv would show in ps).
      t.match(row[1], new RegExp(`^\`(${TEST_HOSTS_ENV}|${EGRESS_ENV.caInline})\``), 'the test hosts or the inline CA');
      continue;
    }
    t.notOk(byFlag.has(flag), `--${flag}: one row`);
    byFlag.set(flag, row);
  }
  t.same([...byFlag.keys()].sort(), Object.keys(OPTIONS).sort(), 'every flag, and no other');
  for (const [flag, option] of Object.entries(OPTIONS)) {
    const row = byFlag.get(flag);
    if (row === undefined) continue;
    t.equal(/^`([A-Z_]+)`/.exec(row[1] ?? '')?.[1], option.env, `--${flag}: its environment twin`);
    const stated = helpDefault(option.help);
    if (stated !== undefined) t.equal((row[2] ?? '').replace(/`/g, '').split(' ')[0], stated, `--${flag}: its default`);
  }
});

t.test('the default reader reads every form the help text uses', async (t) => {
  t.equal(helpDefault('address to listen on (default 127.0.0.1:3128)'), '127.0.0.1:3128');
  t.equal(helpDefault('ports (overrides the policy file; default 443,80)'), '443,80');
  t.equal(helpDefault('mode (default tls: a hello must come first)'), 'tls');
  t.equal(helpDefault('longest tunnel lifetime, 0 for none (default 0)'), '0');
  t.equal(helpDefault('policy file'), undefined);
});

for (const folder of ['proxy', 'policy']) {
  t.test(`the Layout names every file of ${folder}/`, async (t) => {
    // A folder kept in rooms has a row of its own for each room.
    const rows = tableAfter('## Layout').filter((r) => (r[0] ?? '').startsWith(`\`${folder}/`));
    t.ok(rows.some((r) => r[0] === `\`${folder}/\``), `a row for ${folder}/`);
    const named: string[] = [];
    for (const row of rows) {
      const dir = /^`([a-z/]+)\/`$/.exec(row[0] ?? '')?.[1] ?? '';
      for (const m of (row[1] ?? '').matchAll(/`([a-z0-9-]+\.ts)`/g)) if (m[1] !== 'index.ts') named.push(`${dir}/${m[1]}`);
    }
    const files = readdirSync(join(root, folder), { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts') && basename(f) !== 'index.ts')
      .map((f) => `${folder}/${f}`);
    t.same(named.sort(), files.sort(), 'the files named, each in its room\'s row, are the files there (index.ts aside)');
  });
}
