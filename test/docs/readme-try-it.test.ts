/**
 * The README's "Try it" section, run as written: every `npx capybara-sandbox` line of its shell
 * blocks goes through bash and the built bin, and the first one's output must be the one the
 * README shows. Only what keeps a test run apart from a real deployment on the same engine is
 * added: the test's own socket directory, proxy container, shared network and sandbox name, and
 * deb.debian.org pinned to the test's upstream (so no traffic leaves the networks it made).
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sandboxTestEnv } from '../support/sandbox-env.js';
import { SOCKET_PROXY_IMAGE, TEST_LABEL } from '../support/docker.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** The text of one `## ` section. */
function section(title: string): string {
  const start = readme.indexOf(`\n## ${title}`);
  if (start === -1) throw new Error(`README has no section "## ${title}"`);
  const end = readme.indexOf('\n## ', start + 1);
  return readme.slice(start, end === -1 ? undefined : end);
}

function blocks(text: string, lang: string): string[] {
  return [...text.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1] ?? '');
}

/** Shell lines starting with `npx capybara-sandbox`, backslash continuations joined. */
function cliCommands(block: string): string[] {
  const joined = block.replace(/\\\n/g, ' ');
  return joined.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('npx capybara-sandbox '));
}

/** Every shown line appears in order as a whole line of `actual`; `...` skips any lines. */
function matchesShown(actual: string, shown: string): string | undefined {
  const lines = actual.split(/\r?\n/);
  let at = 0;
  for (const want of shown.trimEnd().split('\n')) {
    if (want === '...') continue;
    const found = lines.indexOf(want, at);
    if (found === -1) return `missing line ${JSON.stringify(want)} (after line ${at})`;
    at = found + 1;
  }
  return undefined;
}

function bash(command: string, env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('bash', ['-c', command], { cwd: root, env, timeout: 180_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr });
    });
  });
}

// `npx NAME` in a clone runs the bin from npx's cache, which links (and marks executable) only
// on its first use for a path: once that entry exists, a fresh build's bin must be executable
// itself. Checked before this file's first npx, which would mark it.
t.test('the build leaves every package bin executable', { skip: existsSync(join(root, 'dist')) ? false : 'dist not built (npm run build)' }, async (t) => {
  const { bin } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { bin: Record<string, string> };
  t.ok(Object.keys(bin).length >= 2, 'package.json names the bins');
  for (const [name, path] of Object.entries(bin)) {
    const file = join(root, path);
    t.equal(statSync(file).mode & 0o111, 0o111, `${name}: ${path} is executable`);
    t.match(readFileSync(file, 'utf8'), /^#!\/usr\/bin\/env (-S )?node\b/, `${name}: ${path} starts with a node shebang`);
  }
});

t.test('the README try-it commands, as written', { skip: existsSync(join(root, 'dist/controller/operator/cli.js')) ? false : 'dist not built (npm run build)' }, async (t) => {
  const tryIt = section('Try it');
  const commands = blocks(tryIt, 'sh').flatMap(cliCommands);
  const [shown] = blocks(tryIt, 'text');
  t.ok(commands.length >= 3 && shown !== undefined, 'the section has the commands and their output');
  t.match(commands[0], /^npx capybara-sandbox run demo --allow deb\.debian\.org -- /, 'the first command runs in an allowlist sandbox');

  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env } = s;
  // Under /run (root's, 0755): every directory above the socket of up must be root's alone.
  const dir = mkdtempSync('/run/cap-readme-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const apart = ['--socket-dir', join(dir, 'sock'), '--proxy-name', `sockproxy-${env.runId}-readme`, '--proxy-image', SOCKET_PROXY_IMAGE, '--network', s.sharedNetwork, '--label', `${TEST_LABEL}=${env.runId}`].join(' ');
  const demo = `${env.runId}-demo`;
  const runEnv = { ...process.env, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'deb.debian.org': s.upstreamIp }) };

  for (const [i, command] of (commands as string[]).entries()) {
    const isolated = command
      .replace(/^npx capybara-sandbox /, `npx capybara-sandbox ${apart} `)
      .replace(/ (run|create|exec|destroy|inspect|logs) demo\b/, ` $1 ${demo}`);
    const started = Date.now();
    const r = await bash(isolated, runEnv);
    t.comment(`${command.slice(0, 60)}... took ${Date.now() - started} ms`);
    t.equal(r.code, 0, `${command}: exit 0\n${r.stderr}`);
    if (i === 0) {
      // The refusal names the sandbox, which the test names apart.
      t.equal(matchesShown(r.stdout, (shown ?? '').replaceAll('cap-demo', `cap-${demo}`)), undefined, `the output the README shows:\n${r.stdout}`);
      t.match(r.stderr, /starting one \(capybara-sandbox up\)/, 'the socket proxy was started on first use');
      t.match(r.stderr, /creating cap-\S+-demo: image capybara-sandbox:latest, egress allowlist \[deb\.debian\.org\]/);
    }
    if (/; id'/.test(command)) t.match(r.stdout, /^uid=1000\(sandbox\) /m, 'commands run as the unprivileged sandbox user');
  }
  t.same(await s.labelled(`cap-${demo}`), [], 'destroy left nothing of the sandbox');
  t.ok(await env.docker.getContainer(`sockproxy-${env.runId}-readme`).inspect().then(() => false, () => true), 'down removed the socket proxy');
});
