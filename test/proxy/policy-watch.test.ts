/**
 * The policy watcher's view of a file reached through symlinks (which directories decide what
 * the file is), and its periodic re-check, on real files in a temporary directory. The CLI tests
 * (cli.test.ts) run the whole reload through the real command.
 */
import { mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../proxy/record/log.js';
import { RECHECK_MS, resolutionDirs, watchPolicyFile } from '../../proxy/policy-watch.js';

const tmp = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'egress-watch-')));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));

let caseNo = 0;
const rows: { name: string; layout: (root: string) => string; dirs: Record<string, string[]> }[] = [
  {
    name: 'a plain file: its directory, its name',
    layout: (root) => {
      writeFileSync(path.join(root, 'policy.yaml'), '');
      return path.join(root, 'policy.yaml');
    },
    dirs: { '.': ['policy.yaml'] },
  },
  {
    name: 'a symlink into another directory: both directories',
    layout: (root) => {
      mkdirSync(path.join(root, 'etc'));
      mkdirSync(path.join(root, 'data'));
      writeFileSync(path.join(root, 'data', 'policy.yaml'), '');
      symlinkSync('../data/policy.yaml', path.join(root, 'etc', 'policy.yaml'));
      return path.join(root, 'etc', 'policy.yaml');
    },
    dirs: { etc: ['policy.yaml'], data: ['policy.yaml'] },
  },
  {
    name: 'a ConfigMap volume: the volume (file link and ..data) and the timestamped directory',
    layout: (root) => {
      mkdirSync(path.join(root, '..2026_01_02.1'));
      writeFileSync(path.join(root, '..2026_01_02.1', 'policy.yaml'), '');
      symlinkSync('..2026_01_02.1', path.join(root, '..data'));
      symlinkSync('..data/policy.yaml', path.join(root, 'policy.yaml'));
      return path.join(root, 'policy.yaml');
    },
    dirs: { '.': ['policy.yaml', '..data'], '..2026_01_02.1': ['policy.yaml'] },
  },
  {
    name: 'a symlinked directory on the way (etc -> conf.d), and ".." after a link',
    layout: (root) => {
      mkdirSync(path.join(root, 'conf.d'));
      mkdirSync(path.join(root, 'other'));
      writeFileSync(path.join(root, 'other', 'policy.yaml'), '');
      symlinkSync('conf.d', path.join(root, 'etc'));
      symlinkSync('../other/policy.yaml', path.join(root, 'conf.d', 'policy.yaml'));
      return path.join(root, 'etc', 'policy.yaml');
    },
    dirs: { '.': ['etc'], 'conf.d': ['policy.yaml'], other: ['policy.yaml'] },
  },
  {
    name: 'an absolute link',
    layout: (root) => {
      mkdirSync(path.join(root, 'data'));
      writeFileSync(path.join(root, 'data', 'policy.yaml'), '');
      symlinkSync(path.join(root, 'data', 'policy.yaml'), path.join(root, 'policy.yaml'));
      return path.join(root, 'policy.yaml');
    },
    dirs: { '.': ['policy.yaml'], data: ['policy.yaml'] },
  },
  {
    name: 'a missing directory on the way: the last directory there is, for the name to appear',
    layout: (root) => path.join(root, 'gone', 'policy.yaml'),
    dirs: { '.': ['gone'] },
  },
  {
    name: 'a dangling link: its directory, and the directory its target would be in',
    layout: (root) => {
      mkdirSync(path.join(root, 'data'));
      symlinkSync('data/policy.yaml', path.join(root, 'policy.yaml'));
      return path.join(root, 'policy.yaml');
    },
    dirs: { '.': ['policy.yaml'], data: ['policy.yaml'] },
  },
  {
    name: 'a symlink loop ends (ELOOP, as the kernel does)',
    layout: (root) => {
      symlinkSync('b', path.join(root, 'a'));
      symlinkSync('a', path.join(root, 'b'));
      return path.join(root, 'a');
    },
    dirs: { '.': ['a', 'b'] },
  },
];
for (const row of rows) {
  t.test(`resolution directories: ${row.name}`, async (t) => {
    const root = path.join(tmp, `case${(caseNo += 1)}`);
    mkdirSync(root);
    const file = row.layout(root);
    const got = Object.fromEntries([...resolutionDirs(file)].map(([dir, names]) => [path.relative(root, dir) || '.', [...names].sort()]));
    t.same(got, Object.fromEntries(Object.entries(row.dirs).map(([dir, names]) => [dir, [...names].sort()])));
  });
}

t.test('a change no watch can report (the directory moved away, a new one made) is found by the re-check', async (t) => {
  const root = path.join(tmp, 'moved');
  mkdirSync(path.join(root, 'a', 'etc'), { recursive: true });
  const file = path.join(root, 'a', 'etc', 'policy.yaml');
  writeFileSync(file, 'one');
  const lines: string[] = [];
  const sink = new Writable({ write: (chunk: Buffer, _enc, cb) => (lines.push(chunk.toString()), cb()) });
  const reloads: number[] = [];
  const start = Date.now();
  const watcher = watchPolicyFile(file, createLogger('info', sink), () => reloads.push(Date.now() - start));
  t.teardown(() => watcher.close());
  // The watches sit on root/a/etc. Moving root/a tells them nothing (their directory still
  // exists, elsewhere); root is not watched, since no link passes through it.
  renameSync(path.join(root, 'a'), path.join(root, 'b'));
  mkdirSync(path.join(root, 'a', 'etc'), { recursive: true });
  writeFileSync(file, 'two');
  const deadline = RECHECK_MS + 3_000;
  while (reloads.length === 0 && Date.now() - start < deadline) await new Promise((r) => setTimeout(r, 50));
  t.equal(reloads.length, 1, `reloaded once (after ${reloads[0]} ms)`);
  t.same(lines, [], 'nothing to warn about');
});
