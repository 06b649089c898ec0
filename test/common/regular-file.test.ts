/**
 * The bounded read of a configured file (common/regular-file.ts): a regular file up to the cap is
 * read whole, to its end; a larger one, a device, a FIFO or a directory is refused at once, never
 * read whole and never waited on; a symbolic link is refused when asked.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { isCodedError, readRegularFile } from '../../common/index.js';

const dir = mkdtempSync(join(tmpdir(), 'regular-file-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const CAP = 1024;
const file = (name: string, bytes: number): string => {
  writeFileSync(join(dir, name), 'x'.repeat(bytes));
  return join(dir, name);
};
const fifo = join(dir, 'fifo');
t.equal(spawnSync('mkfifo', [fifo]).status, 0, 'a FIFO to read');
const sparse = join(dir, 'sparse');
writeFileSync(sparse, '');
truncateSync(sparse, 4 * 1024 ** 3);
mkdirSync(join(dir, 'dir'));
symlinkSync(file('target', 3), join(dir, 'link'));

const problem = (path: string, noFollow = false): string => {
  try {
    readRegularFile(path, { maxBytes: CAP, noFollow });
    return 'read';
  } catch (err) {
    return isCodedError(err, 'RegularFileError') ? err.code : ((err as NodeJS.ErrnoException).code ?? String(err));
  }
};

t.test('what is read and what is refused', async (t) => {
  const rows = [
    { name: 'a file under the cap', path: file('small', 10), says: 'read' },
    { name: 'a file of exactly the cap', path: file('full', CAP), says: 'read' },
    { name: 'a file one byte over', path: file('over', CAP + 1), says: 'file_too_large' },
    { name: 'a 4 GiB file, refused by its size before a byte is read', path: sparse, says: 'file_too_large' },
    { name: '/dev/zero, endless', path: '/dev/zero', says: 'not_regular_file' },
    { name: 'a FIFO nobody writes to, never waited on', path: fifo, says: 'not_regular_file' },
    { name: 'a directory', path: join(dir, 'dir'), says: 'not_regular_file' },
    { name: 'a symbolic link, followed by default', path: join(dir, 'link'), says: 'read' },
    { name: 'a symbolic link with noFollow', path: join(dir, 'link'), noFollow: true, says: 'ELOOP' },
    { name: 'a missing file', path: join(dir, 'missing'), says: 'ENOENT' },
  ];
  for (const row of rows) t.equal(problem(row.path, row.noFollow), row.says, row.name);
});

t.test('read to the end, not to the size fstat gives (a /proc file says 0)', async (t) => {
  t.match(readRegularFile('/proc/self/status', { maxBytes: 64 * 1024 }).toString('utf8'), /^Name:/);
  t.equal(problem('/proc/self/status'), 'file_too_large', 'and a /proc file over the cap is refused once read past it');
});

t.test('check sees the opened file before anything is read', async (t) => {
  const seen: number[] = [];
  t.equal(readRegularFile(file('checked', 5), { maxBytes: CAP, check: (st) => void seen.push(st.size) }).toString(), 'xxxxx');
  t.same(seen, [5]);
  t.throws(() => readRegularFile('/dev/zero', { maxBytes: CAP, check: () => { throw new Error('refused by check'); } }), /refused by check/);
});
