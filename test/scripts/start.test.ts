/**
 * `npm start` (scripts/start.mjs, scripts/build.mjs): it compiles only when a source changed
 * since the last build, and stopping npm stops the proxy: npm's SIGTERM or SIGINT reaches the
 * proxy, which closes its port and ends, never left listening behind a dead npm.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import t from 'tap';
import { builtFingerprint, EGRESS_BUNDLE, EGRESS_COMMAND, fingerprint, isBuilt, ROOT } from '../../scripts/build.mjs';
import { freePort } from '../support/loopback.js';
import { needUnmet } from '../support/needs.js';
import { alive, childrenOf } from '../support/processes.js';

t.test('the fingerprint follows the sources tsconfig.json compiles and the build settings, nothing else', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'capybara-build-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'lib/deep'), { recursive: true });
  mkdirSync(join(root, 'dist'));
  writeFileSync(join(root, 'tsconfig.json'), JSON.stringify({ include: ['lib/**/*.ts', 'index.mts'] }));
  writeFileSync(join(root, 'package.json'), '{}');
  writeFileSync(join(root, 'lib/a.ts'), 'export const a = 1;\n');
  writeFileSync(join(root, 'lib/deep/b.ts'), 'export const b = 2;\n');
  writeFileSync(join(root, 'index.mts'), "export * from './lib/a.js';\n");
  const first = fingerprint(root);
  t.equal(fingerprint(root), first, 'the same sources, the same fingerprint');
  t.equal(builtFingerprint(root), undefined, 'never built');
  t.notOk(isBuilt(root));
  writeFileSync(join(root, 'dist/.sources'), `${first}\n`);
  t.notOk(isBuilt(root), 'the fingerprint without the egress bundle is no build');
  mkdirSync(join(root, dirname(EGRESS_BUNDLE)), { recursive: true });
  writeFileSync(join(root, EGRESS_BUNDLE), '');
  t.notOk(isBuilt(root), 'nor the bundle without its launcher');
  writeFileSync(join(root, EGRESS_COMMAND), '');
  t.ok(isBuilt(root), 'built from these sources');

  writeFileSync(join(root, 'README.md'), 'not compiled\n');
  writeFileSync(join(root, 'lib/notes.txt'), 'not a source\n');
  t.ok(isBuilt(root), 'a file tsc does not compile changes nothing');
  const changes: [string, () => void][] = [
    ['a source edited', () => writeFileSync(join(root, 'lib/deep/b.ts'), 'export const b = 3;\n')],
    ['a source added', () => writeFileSync(join(root, 'lib/c.ts'), 'export const c = 4;\n')],
    ['a source removed', () => rmSync(join(root, 'lib/c.ts'))],
    ['a top-level file edited', () => writeFileSync(join(root, 'index.mts'), "export * from './lib/deep/b.js';\n")],
    ['the lock file written', () => writeFileSync(join(root, 'package-lock.json'), '{"lockfileVersion":3}')],
  ];
  let last = first;
  for (const [what, change] of changes) {
    change();
    const now = fingerprint(root);
    t.not(now, last, `${what}: compiled again`);
    last = now;
  }
  writeFileSync(join(root, 'tsconfig.json'), JSON.stringify({ include: ['lib/*.ts'] }));
  t.throws(() => fingerprint(root), /include pattern lib\/\*\.ts is not one build.mjs can list/, 'a pattern it cannot list is an error, not a stale build');
});

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  t.test(`npm start on a fresh build starts the proxy without compiling, and ${signal} to npm stops it`, async (t) => {
    // npm test builds first (so does CI); a source edited since makes npm start compile, for a minute.
    if (!isBuilt()) return needUnmet(t, 'the sources changed since the last build: npm start would compile now (npm run build first)');
    const port = await freePort();
    const npm = spawn('npm', ['start', '--silent', '--', '--listen', `127.0.0.1:${port}`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    const output = { stdout: '', stderr: '' };
    npm.stdout.on('data', (d: Buffer) => (output.stdout += d.toString()));
    npm.stderr.on('data', (d: Buffer) => (output.stderr += d.toString()));
    let proxyPid: number | undefined;
    t.teardown(() => {
      npm.kill('SIGKILL');
      if (proxyPid !== undefined && alive(proxyPid)) process.kill(proxyPid, 'SIGKILL');
    });
    await until('the proxy to listen', () => /"event":"listening"/.test(output.stdout) || npm.exitCode !== null);
    t.match(output.stdout, /"event":"listening"/, `listening (stderr: ${output.stderr})`);
    t.notMatch(output.stderr, /compiling/, 'nothing to compile');
    t.ok(await accepts(port), 'the port takes connections');
    // npm runs the script with exec: the proxy is npm's own child, not a shell's.
    const children = childrenOf(npm.pid!);
    t.equal(children.length, 1, 'npm has one child');
    proxyPid = children[0];
    t.match(readFileSync(`/proc/${proxyPid}/cmdline`, 'utf8'), /scripts\/start\.mjs/, 'and it is the proxy');

    npm.kill(signal);
    await until('npm to exit', () => npm.exitCode !== null || npm.signalCode !== null);
    await until('the proxy to end', () => !alive(proxyPid!));
    t.notOk(await accepts(port), 'nothing listens on the port any more');
    t.match(output.stdout, new RegExp(`"event":"stopping","signal":"${signal}"`), 'the proxy saw the signal and stopped');
  });
}
