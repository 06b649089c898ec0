/**
 * The socket of up lives in a directory only root may change, all the way up: a user who owns (or
 * may write to) any directory above it could rename the socket directory and listen in its place,
 * and root's commands would then talk to an impostor. Every command that talks to the socket of
 * up, or manages it, refuses such a path before it opens anything (exit 2, naming the directory),
 * not only up: the directory can be swapped after up made it. Real directories, real owners.
 */
import t from 'tap';
import { chmodSync, chownSync, lchownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { needUnmet } from '../../support/needs.js';
import { runOperator } from '../../../controller/operator/index.js';

interface Ran { code: number; stderr: string }

async function op(argv: string[]): Promise<Ran> {
  let stderr = '';
  // No engine answers on this endpoint: a command that got past the check fails to connect (exit 1).
  const code = await runOperator(argv, { stdout: () => undefined, stderr: (x) => { stderr += x; }, env: { ...process.env, DOCKER_HOST: 'unix:///nonexistent/docker.sock' } });
  return { code, stderr };
}

t.test('a socket directory below one that is not root\'s alone is refused by every command', async (t) => {
  if (process.getuid?.() !== 0) return needUnmet(t, 'needs root (the test gives directories to another owner)');
  // Under /run (root's, 0755): /tmp itself is writable by everyone.
  const base = mkdtempSync('/run/cap-sockdir-');
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const userOwned = join(base, 'user');
  mkdirSync(userOwned, { mode: 0o755 });
  chownSync(userOwned, 1000, 1000);
  const groupWritable = join(base, 'group');
  mkdirSync(groupWritable);
  chmodSync(groupWritable, 0o775);
  const real = join(base, 'real');
  mkdirSync(real, { mode: 0o755 });
  const link = join(base, 'link');
  symlinkSync(real, link);
  lchownSync(link, 1000, 1000);
  const ok = join(base, 'ok');

  const places = [
    { name: 'a parent a user owns', dir: join(userOwned, 'sock'), problem: /owned by uid 1000/ },
    { name: 'a group-writable parent', dir: join(groupWritable, 'sock'), problem: /mode 0775, writable by its group/ },
    { name: 'a symlink on the way a user owns', dir: join(link, 'sock'), problem: /link is owned by uid 1000/ },
    { name: 'the socket directory itself writable by others', dir: ok, problem: /mode 0777/, setup: () => { mkdirSync(ok); chmodSync(ok, 0o777); } },
  ];
  const commands = [['up'], ['down'], ['create', 'demo'], ['run', 'demo', '--', 'true'], ['exec', 'demo', '--', 'true'], ['inspect', 'demo'], ['destroy', 'demo'], ['doctor']];
  for (const place of places) {
    place.setup?.();
    for (const command of commands) {
      const r = await op(['--socket-dir', place.dir, '--proxy-name', 'sockproxy-dirtest', ...command]);
      t.equal(r.code, 2, `${place.name}: ${command[0]} refuses (${r.stderr.trim().slice(0, 200)})`);
      t.match(r.stderr, place.problem, `${place.name}: ${command[0]} names the problem`);
      t.match(r.stderr, /--socket-dir/, `${place.name}: ${command[0]} says what to do`);
    }
  }

  // The same commands with a directory only root can change get past the check (and then find no
  // socket proxy or engine there).
  const good = join(base, 'good', 'sock');
  for (const command of [['exec', 'demo', '--', 'true'], ['inspect', 'demo']]) {
    const r = await op(['--socket-dir', good, ...command]);
    t.notMatch(r.stderr, /is not safe/, `a root-only path: ${command[0]} is not refused for its directory`);
  }
});
