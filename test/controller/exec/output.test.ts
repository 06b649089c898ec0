import t from 'tap';
import { OutputCapture, utf8SafeLength } from '../../../controller/exec/output-capture.js';
import { StreamDemux } from '../../../controller/docker/stream-demux.js';
import { parseStat, writeTarget } from '../../../controller/exec/files.js';

t.test('utf8SafeLength never ends inside a character', async (t) => {
  const rows: { name: string; bytes: number[]; want: number }[] = [
    { name: 'ascii', bytes: [0x61, 0x62], want: 2 },
    { name: 'complete 2-byte', bytes: [0x61, 0xc3, 0xa9], want: 3 },
    { name: 'cut 2-byte', bytes: [0x61, 0xc3], want: 1 },
    { name: 'cut 3-byte after 1', bytes: [0x61, 0xe2], want: 1 },
    { name: 'cut 3-byte after 2', bytes: [0x61, 0xe2, 0x82], want: 1 },
    { name: 'complete 3-byte', bytes: [0xe2, 0x82, 0xac], want: 3 },
    { name: 'cut 4-byte after 3', bytes: [0x61, 0xf0, 0x9f, 0x98], want: 1 },
    { name: 'complete 4-byte', bytes: [0xf0, 0x9f, 0x98, 0x80], want: 4 },
    { name: 'empty', bytes: [], want: 0 },
  ];
  for (const row of rows) t.equal(utf8SafeLength(Uint8Array.from(row.bytes)), row.want, row.name);
});

t.test('OutputCapture truncates at a character boundary and says so', async (t) => {
  const cap = new OutputCapture(5);
  cap.push(Buffer.from('ab€'));  // 5 bytes exactly
  t.equal(cap.truncated, false);
  cap.push(Buffer.from('x'));
  t.equal(cap.truncated, true);
  t.equal(cap.text(), 'ab€');
  const cut = new OutputCapture(4);
  cut.push(Buffer.from('ab€c'));
  t.equal(cut.text(), 'ab');
  t.equal(cut.truncated, true);
});

t.test('StreamDemux splits frames even when headers are split', async (t) => {
  const frame = (type: number, text: string) => {
    const payload = Buffer.from(text);
    const header = Buffer.alloc(8);
    header.writeUInt8(type, 0);
    header.writeUInt32BE(payload.length, 4);
    return Buffer.concat([header, payload]);
  };
  const all = Buffer.concat([frame(1, 'hello '), frame(2, 'oops'), frame(1, 'world'), frame(1, '')]);
  for (const size of [1, 3, 7, 8, 9, all.length]) {
    const got = { stdout: '', stderr: '' };
    const demux = new StreamDemux((stream, chunk) => (got[stream] += chunk.toString()));
    for (let i = 0; i < all.length; i += size) demux.push(all.subarray(i, i + size));
    t.same(got, { stdout: 'hello world', stderr: 'oops' }, `chunk size ${size}`);
    t.ok(demux.complete);
  }
  const bad = new StreamDemux(() => undefined);
  t.throws(() => bad.push(Buffer.from([9, 0, 0, 0, 0, 0, 0, 1, 0])));
});

t.test('parseStat', async (t) => {
  t.same(parseStat('regular file|12|644|1700000000.123\n'), { type: 'file', size: 12, mode: 0o644, mtimeMs: 1700000000123 });
  t.same(parseStat('directory|4096|1777|1.5'), { type: 'directory', size: 4096, mode: 0o1777, mtimeMs: 1500 });
  t.equal(parseStat('symbolic link|4|777|1').type, 'symlink');
  t.equal(parseStat('fifo|0|600|1').type, 'other');
});

t.test('writes to /skills go through the root-only mount', async (t) => {
  t.same(writeTarget('/skills/a/b.md'), { path: '/opt/capybara/skills/a/b.md', user: '0:0', confineTo: '/opt/capybara/skills' });
  t.same(writeTarget('/workspace/../skills/x'), { path: '/opt/capybara/skills/x', user: '0:0', confineTo: '/opt/capybara/skills' });
  t.same(writeTarget('/workspace/a'), { path: '/workspace/a', user: '1000:1000' });
  t.same(writeTarget('/skillsets/a'), { path: '/skillsets/a', user: '1000:1000' });
});
