/**
 * The operator CLI's conventions, without an engine: every command's --help (and `help COMMAND`),
 * the global help's one line per command, ls's -q/--format/--filter as parsed, and usage errors
 * that exit 2 and name the flag that failed. Run through the built bin, as an operator runs it,
 * where the output is the point; the tables of flags in-process through runOperator (same code).
 */
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMMAND_HELP, OPERATOR_COMMANDS, commandOptions, runOperator } from '../../../controller/operator/index.js';
import { parseOperatorArgs } from '../../../controller/operator/args.js';
import { needUnmet } from '../../support/needs.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const bin = join(root, 'dist/controller/operator/cli.js');

async function op(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runOperator(argv, { stdout: (s) => { stdout += s; }, stderr: (s) => { stderr += s; } });
  return { code, stdout, stderr };
}

t.test('COMMAND --help: usage, arguments, options and an example for every command, exit 0', async (t) => {
  for (const command of OPERATOR_COMMANDS) {
    const r = await op([command, '--help']);
    t.equal(r.code, 0, `${command} --help exits 0`);
    t.equal(r.stderr, '', `${command} --help: nothing on stderr`);
    t.match(r.stdout, new RegExp(`^capybara-sandbox ${command}: \\S`), `${command}: its summary first`);
    t.match(r.stdout, new RegExp(`^Usage:\\n  capybara-sandbox \\[global options\\] ${command}\\b`, 'm'), `${command}: usage`);
    t.match(r.stdout, new RegExp(`^Examples?:\\n  (sudo )?capybara-sandbox .*\\b${command}\\b`, 'm'), `${command}: an example that runs it`);
    // Every option that only some commands take, and this one does, is explained in its help.
    for (const option of commandOptions(command)) t.match(r.stdout, new RegExp(`^  (-\\w, )?${option}\\b`, 'm'), `${command} --help explains ${option}`);
    if (COMMAND_HELP[command].usage.includes('NAME')) t.match(r.stdout, /^Arguments:\n  NAME /m, `${command}: explains NAME`);
    t.same(await op(['help', command]), r, `help ${command} is ${command} --help`);
    t.same(await op(['-h', command]), r, `-h ${command} too`);
  }
  t.match(await op(['help', 'lsx']), { code: 2, stderr: /unknown command "lsx"/ }, 'help of an unknown command is a usage error');
});

t.test('the global help lists every command on one line', async (t) => {
  const r = await op(['--help']);
  t.equal(r.code, 0);
  const block = /^Commands:\n((?: {2}\S.*\n)+)/m.exec(r.stdout)?.[1] ?? '';
  const lines = block.trimEnd().split('\n');
  t.same(lines.map((l) => l.trim().split(/\s+/)[0]), [...OPERATOR_COMMANDS], 'one line each, in order');
  for (const command of OPERATOR_COMMANDS) t.match(block, `${command} `.padEnd(2) + ' ', command);
  t.same(await op(['help']), r, 'help alone is --help');
  for (const word of ['--config', '--endpoint', '--json', '--label', '--version', 'COMMAND --help']) t.match(r.stdout, word);
});

t.test('the built bin: --help, ls --help, help down', async (t) => {
  if (!existsSync(bin)) return needUnmet(t, 'dist not built (npm run build)');
  const run = (...argv: string[]) => spawnSync(process.execPath, [bin, ...argv], { encoding: 'utf8' });
  const global = run('--help');
  t.same([global.status, global.stderr], [0, '']);
  t.match(global.stdout, /^ {2}ls +list the sandboxes/m);
  const ls = run('ls', '--help');
  t.equal(ls.status, 0);
  t.match(ls.stdout, /^ {2}-q, --quiet +names only/m);
  t.match(ls.stdout, /^ {2}--filter status=STATE +only sandboxes in that state: created, restarting, running, removing, paused, exited, dead/m);
  const down = run('help', 'down');
  t.equal(down.status, 0);
  t.match(down.stdout, /^ {2}--all +destroy every sandbox/m);
  const bad = run('--endpoint', 'unix:///x.sock', 'ls', '--filter', 'name=web');
  t.equal(bad.status, 2, 'a usage error exits 2');
  t.match(bad.stderr, /^capybara-sandbox: invalid_config: --filter "name=web": unknown filter "name"; the keys are label= and status=/);
});

t.test('the built bin: a reader that went away ends the command quietly', async (t) => {
  if (!existsSync(bin)) return needUnmet(t, 'dist not built (npm run build)');
  // The read end is closed before the CLI starts writing: every write of it fails EPIPE.
  const child = spawn(process.execPath, [bin, '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.destroy();
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  t.same([code, signal, stderr], [0, null, ''], 'exit 0, and nothing on stderr (no stack trace)');
});

t.test('ls options as parsed', async (t) => {
  const ls = (...argv: string[]) => parseOperatorArgs(['ls', ...argv]).ls;
  t.same(ls(), { quiet: false, format: undefined, labels: [], statuses: [] }, 'defaults: the table');
  t.same(ls('-q'), { quiet: true, format: undefined, labels: [], statuses: [] });
  t.same(ls('--quiet').quiet, true);
  t.same(ls('--format', 'json').format, 'json');
  t.same(ls('--format', 'table').format, 'table');
  t.same(ls('--filter', 'label=team=ml', '--filter', 'label=owner', '--filter', 'label=note=a=b').labels, ['team=ml', 'owner', 'note=a=b'], 'labels add up; a value may hold "="');
  t.same(ls('--filter', 'status=running', '--filter', 'status=exited', '--filter', 'status=running').statuses, ['running', 'exited'], 'statuses are alternatives, each once');
});

t.test('usage errors exit 2 and name the flag that failed', async (t) => {
  const e = ['--endpoint', 'unix:///nonexistent.sock'];
  const rows: Array<{ name: string; argv: string[]; err: RegExp }> = [
    { name: 'unknown --format', argv: [...e, 'ls', '--format', 'yaml'], err: /--format "yaml" is not one of table, json/ },
    { name: 'unknown filter key', argv: [...e, 'ls', '--filter', 'name=x'], err: /--filter "name=x": unknown filter "name"; the keys are label= and status=/ },
    { name: 'a filter without "="', argv: [...e, 'ls', '--filter', 'running'], err: /--filter "running": unknown filter "running"/ },
    { name: 'unknown status', argv: [...e, 'ls', '--filter', 'status=up'], err: /--filter "status=up": status must be one of created, restarting, running, removing, paused, exited, dead/ },
    { name: 'label filter without a key', argv: [...e, 'ls', '--filter', 'label='], err: /--filter "label=": label= needs KEY or KEY=VALUE/ },
    { name: 'label filter with an empty key', argv: [...e, 'ls', '--filter', 'label==x'], err: /--filter "label==x": label= needs KEY/ },
    { name: '-q with --format', argv: [...e, 'ls', '-q', '--format', 'table'], err: /-q prints names only; leave out --format/ },
    { name: '-q with --json', argv: [...e, '--json', 'ls', '-q'], err: /-q prints names only; leave out --json/ },
    { name: '--format table with --json', argv: [...e, '--json', 'ls', '--format', 'table'], err: /--format table contradicts --json/ },
    { name: '--filter on gc', argv: [...e, 'gc', '--filter', 'status=running'], err: /--filter does not apply to gc \(only to ls\)/ },
    { name: '--all on ls', argv: [...e, 'ls', '--all'], err: /--all does not apply to ls \(only to down\)/ },
    { name: '-q on inspect', argv: [...e, 'inspect', 'demo', '-q'], err: /--quiet does not apply to inspect/ },
    { name: 'a value missing', argv: [...e, 'exec', 'demo', '--timeout'], err: /'--timeout <value>' argument missing/ },
    { name: 'bad --timeout', argv: [...e, 'exec', 'demo', '--timeout', '5x', '--', 'true'], err: /--timeout "5x" is not a duration/ },
    { name: 'bad --endpoint', argv: ['--endpoint', 'http://proxy:2375', 'ls'], err: /--endpoint "http:\/\/proxy:2375" is invalid: endpoint: must be tcp:\/\/host:port or unix:\/\/\/path/ },
    { name: 'bad --network', argv: [...e, '--network', 'a b', 'ls'], err: /--network "a b" is invalid: network: must start with "cap"/ },
    { name: 'relative --socket-dir', argv: ['--socket-dir', 'run/x', 'up'], err: /--socket-dir "run\/x" must be an absolute path/ },
    { name: 'empty --proxy-image', argv: ['--proxy-image', '', 'up'], err: /--proxy-image "" is not an image reference/ },
    { name: 'empty --image', argv: [...e, 'create', 'demo', '--image', ''], err: /--image "" is not an image reference/ },
    { name: '--image with a blank', argv: [...e, 'doctor', '--image', 'a b'], err: /--image "a b" is not an image reference/ },
    { name: 'bad --workspace', argv: [...e, 'create', 'demo', '--workspace', 'a/b'], err: /--workspace: Workspace key "a\/b" is not allowed/ },
    { name: 'a port in --allow', argv: [...e, 'create', 'demo', '--allow', 'pypi.org:443'], err: /--allow: "pypi\.org:443" is not allowed/ },
    { name: 'a bare * in --allow, before anything is said', argv: [...e, 'run', 'demo', '--allow', '*', '--', 'true'], err: /^capybara-sandbox: invalid_config: --allow: "\*" is not allowed/ },
    { name: '--cpu above the deployment\'s maximum, before "creating"', argv: [...e, 'run', 'demo', '--cpu', '100', '--', 'true'], err: /^capybara-sandbox: invalid_config: --cpu 100 is above this deployment's maximum of \d+ \(maxLimits\.cpu in the config\)/ },
    { name: '--memory above the deployment\'s maximum', argv: [...e, 'create', 'demo', '--memory', '999999'], err: /--memory 999999 is above this deployment's maximum of \d+ \(maxLimits\.memoryMb/ },
    { name: 'bad --cpu', argv: [...e, 'create', 'demo', '--cpu', 'two'], err: /--cpu "two" must be a positive number/ },
    { name: 'bad --egress', argv: [...e, 'create', 'demo', '--egress', 'closed'], err: /--egress "closed" is not one of none, internal, allowlist, open/ },
    { name: 'bad --label', argv: [...e, 'ls', '--label', 'novalue'], err: /--label "novalue" is not KEY=VALUE/ },
    { name: 'bad --min-age', argv: [...e, 'gc', '--min-age', 'soon'], err: /--min-age "soon" is not a duration/ },
  ];
  for (const row of rows) {
    const r = await op(row.argv);
    t.equal(r.code, 2, `${row.name}: exit 2`);
    t.match(r.stderr, row.err, `${row.name}: ${r.stderr.trim()}`);
    t.equal(r.stdout, '', `${row.name}: nothing on stdout`);
  }
});
