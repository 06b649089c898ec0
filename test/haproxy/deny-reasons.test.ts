/**
 * The socket proxy's deny reasons have one catalog (haproxy/deny-reasons.lua), held equal both
 * ways to the codes haproxy.cfg and the Lua modules give and to SECURITY.md's table: a code a
 * rule gives that the catalog lacks, a catalog entry nothing gives, or a table row that differs,
 * fails here. The codes are read from the sources: every `str(<code>)` haproxy.cfg sets a
 * verdict or a slot to, and every reason-shaped string literal of the pure Lua modules (a word
 * with an underscore, before any ":"), leaving out what those modules also name that is no reason:
 * the routes of routes.map and the keys of the settings.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { needUnmet } from '../support/needs.js';
import { HAPROXY_DIR, luaMissing } from './lua-checker.js';

interface Entry {
  code: string;
  status: number;
  what: string;
}

/** The modules that give reasons (socket-proxy.lua only passes them on, under HAProxy's names). */
const REASON_MODULES = ['body-check.lua', 'docker-schema.lua', 'image-ref.lua', 'network-proof.lua', 'image-proof.lua', 'archive-proof.lua', 'workspace-owner.lua', 'tenant-archive.lua', 'json-strict.lua'];

function lua(code: string): string {
  const run = spawnSync('lua5.4', ['-e', `package.path = ${JSON.stringify(`${HAPROXY_DIR}/?.lua;`)} .. package.path\n${code}`], {
    env: { ...process.env, SOCKET_PROXY_SHARED_NETWORK: 'capybara-sandbox', DOCKER_SOCKET: '/var/run/docker.sock' },
  });
  if (run.status !== 0) throw new Error(run.stderr.toString('utf8'));
  return run.stdout.toString('utf8');
}

function catalog(): Entry[] {
  const out = lua(`for _, e in ipairs(require('deny-reasons')) do io.write(e.code, '\\t', e.status, '\\t', e.what, '\\n') end`);
  return out.trim().split('\n').map((line) => {
    const [code = '', status = '', what = ''] = line.split('\t');
    return { code, status: Number(status), what };
  });
}

/** Every code the sources give. */
function givenCodes(): Set<string> {
  const codes = new Set<string>();
  const cfg = readFileSync(join(HAPROXY_DIR, 'haproxy.cfg'), 'utf8');
  for (const m of cfg.matchAll(/set-var\(txn\.(?:deny|slots|[a-z]+_verdict)\) str\(([a-z_]+)(?::[a-z]+)?\)/g)) codes.add(m[1]!);
  const routes = new Set(readFileSync(join(HAPROXY_DIR, 'routes.map'), 'utf8').split('\n')
    .filter((l) => l.startsWith('^')).map((l) => l.trim().split(/\s+/).at(-1)!));
  const settings = new Set(lua(`for k in pairs(require('proxy-settings').from_env(os.getenv)) do io.write(k, '\\n') end`).trim().split('\n'));
  for (const file of REASON_MODULES) {
    const text = readFileSync(join(HAPROXY_DIR, file), 'utf8').split('\n').filter((l) => !l.trimStart().startsWith('--')).join('\n');
    for (const m of text.matchAll(/'([a-z]+(?:_[a-z0-9]+)+)(?::[^']*)?'/g)) {
      const code = m[1]!;
      if (!routes.has(code) && !settings.has(code)) codes.add(code);
    }
  }
  return codes;
}

t.test('the catalog is what the rules give, both ways', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const entries = catalog();
  const listed = new Set(entries.map((e) => e.code));
  t.equal(listed.size, entries.length, 'each code once');
  const given = givenCodes();
  t.same([...given].filter((c) => !listed.has(c)).sort(), [], 'every code a rule gives is in the catalog');
  t.same([...listed].filter((c) => !given.has(c)).sort(), [], 'every catalog code is given by some rule');
  for (const e of entries) t.ok([403, 404, 429].includes(e.status) && e.what.length > 10, `${e.code}: a status and a sentence`);
});

t.test('SECURITY.md\'s table of deny reasons is the catalog', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const security = readFileSync(fileURLToPath(new URL('../../SECURITY.md', import.meta.url)), 'utf8');
  const start = security.indexOf('**Deny reasons**');
  t.ok(start > 0, 'SECURITY.md has the table');
  const section = security.slice(start, security.indexOf('\n\n', security.indexOf('| --- |', start)));
  const rows = [...section.matchAll(/^\| `([a-z0-9_]+)` \| (\d{3}) \| (.+) \|$/gm)].map((m) => ({ code: m[1]!, status: Number(m[2]), what: m[3]! }));
  t.same(rows, catalog(), 'the same codes, statuses and sentences, in the same order');
});
