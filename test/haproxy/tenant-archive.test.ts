/**
 * The socket proxy's check of a registration archive (haproxy/tenant-archive.lua, route
 * tenant_register), run by the standalone harness on the very file the proxy image loads: every
 * archive the controller's encoder writes passes byte for byte, and every change to a header
 * field, to the framing or to a member of the content is refused with registration_invalid and the
 * name of what was wrong.
 */
import t from 'tap';
import { gzipSync } from 'node:zlib';
import type { Test } from 'tap';
import { registrationArchive, type SlotFileValue } from '../../common/index.js';
import { needUnmet } from '../support/needs.js';
import { checkBodies, luaMissing } from './lua-checker.js';
import { MTIME, REGISTRATIONS, tarOf } from './registrations.js';

interface Row {
  name: string;
  body: Buffer;
  /** 'ok', or the X-Socket-Proxy-Deny value. */
  verdict: string;
}

function judge(t: Test, rows: readonly Row[]): void {
  const verdicts = checkBodies(rows.map((r) => ({ route: 'tenant_register', body: r.body })));
  rows.forEach((row, i) => {
    const v = verdicts[i]!;
    t.equal(v.allowed ? 'ok' : v.reason, row.verdict, row.name);
  });
}

const BASE = REGISTRATIONS[1]!.value as Extract<SlotFileValue, { sandbox: string }>;
const CONTENT = `${JSON.stringify(BASE)}\n`;

/** The base registration with `change` applied to a copy of its value, as compact JSON. */
function changed(change: (v: Record<string, unknown> & { policy: Record<string, unknown> }) => void): string {
  const copy = JSON.parse(CONTENT) as Record<string, unknown> & { policy: Record<string, unknown> };
  change(copy);
  return `${JSON.stringify(copy)}\n`;
}

function withField(offset: number, text: string): (h: Buffer) => void {
  return (h) => {
    h.fill(0, offset, offset + text.length);
    h.write(text, offset, 'latin1');
  };
}

t.test('the encoder\'s archives pass, byte for byte; the test builder writes the same bytes', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  for (const { name, slot, value } of REGISTRATIONS) {
    t.same(tarOf(`${slot}.json`, `${JSON.stringify(value)}\n`), registrationArchive(slot, value, MTIME), `${name}: tarOf is the encoder`);
  }
  judge(t, REGISTRATIONS.map(({ name, slot, value }) => ({ name, body: registrationArchive(slot, value), verdict: 'ok' })));
});

t.test('header fields: each one as the encoder writes it, or refused by name', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const archive = (edit: (h: Buffer) => void, name = 's0.json') => tarOf(name, CONTENT, edit);
  const badChecksum = tarOf('s0.json', CONTENT);
  badChecksum[150] = badChecksum[150] === 0x30 ? 0x31 : 0x30;
  const rows: Row[] = [
    { name: 'the base', body: archive(() => undefined), verdict: 'ok' },
    { name: 'a path in the name', body: archive(() => undefined, 'a/s0.json'), verdict: 'registration_invalid:name' },
    { name: 'a parent in the name', body: archive(() => undefined, '../s0.json'), verdict: 'registration_invalid:name' },
    { name: 'an absolute name', body: archive(() => undefined, '/s0.json'), verdict: 'registration_invalid:name' },
    { name: 'a hidden name', body: archive(() => undefined, '.s0.json'), verdict: 'registration_invalid:name' },
    { name: 'a whiteout name (dockerd\'s layer code deletes what it names)', body: archive(() => undefined, '.wh.s0.json'), verdict: 'registration_invalid:name' },
    { name: 'upper case', body: archive(() => undefined, 'S0.json'), verdict: 'registration_invalid:name' },
    { name: 'not .json', body: archive(() => undefined, 's0.yaml'), verdict: 'registration_invalid:name' },
    { name: 'only .json', body: archive(() => undefined, '.json'), verdict: 'registration_invalid:name' },
    { name: 'a slot of 64', body: archive(() => undefined, `${'a'.repeat(64)}.json`), verdict: 'registration_invalid:name' },
    { name: 'bytes after the name\'s NUL', body: archive(withField(20, 'x')), verdict: 'registration_invalid:name' },
    { name: 'mode 0755', body: archive(withField(100, '0000755\0')), verdict: 'registration_invalid:mode' },
    { name: 'mode setuid', body: archive(withField(100, '0004644\0')), verdict: 'registration_invalid:mode' },
    { name: 'mode with a space for the NUL', body: archive(withField(100, '0000644 ')), verdict: 'registration_invalid:mode' },
    { name: 'uid 1000', body: archive(withField(108, '0001750\0')), verdict: 'registration_invalid:uid' },
    { name: 'gid 1000', body: archive(withField(116, '0001750\0')), verdict: 'registration_invalid:gid' },
    { name: 'size one short of the content', body: archive(withField(124, `${(CONTENT.length - 1).toString(8).padStart(11, '0')}\0`)), verdict: 'registration_invalid:padding' },
    { name: 'size in base-256', body: archive(withField(124, '\x80\0\0\0\0\0\0\0\0\0\x01\x00')), verdict: 'registration_invalid:size' },
    { name: 'size zero', body: archive(withField(124, '00000000000\0')), verdict: 'registration_invalid:size' },
    { name: 'size spelled with spaces', body: archive(withField(124, `${' '.repeat(8)}${CONTENT.length.toString(8)}\0`.slice(-12))), verdict: 'registration_invalid:size' },
    { name: 'mtime not octal', body: archive(withField(136, '1234567890a\0')), verdict: 'registration_invalid:mtime' },
    { name: 'a directory', body: archive(withField(156, '5')), verdict: 'registration_invalid:typeflag' },
    { name: 'a symbolic link', body: archive(withField(156, '2')), verdict: 'registration_invalid:typeflag' },
    { name: 'a hard link', body: archive(withField(156, '1')), verdict: 'registration_invalid:typeflag' },
    { name: 'an old-style regular file (NUL)', body: archive(withField(156, '\0')), verdict: 'registration_invalid:typeflag' },
    { name: 'a contiguous file', body: archive(withField(156, '7')), verdict: 'registration_invalid:typeflag' },
    { name: 'a GNU long name', body: archive(withField(156, 'L')), verdict: 'registration_invalid:typeflag' },
    { name: 'a PAX header', body: archive(withField(156, 'x')), verdict: 'registration_invalid:typeflag' },
    { name: 'a PAX global header', body: archive(withField(156, 'g')), verdict: 'registration_invalid:typeflag' },
    { name: 'a link name', body: archive(withField(157, '/etc/passwd')), verdict: 'registration_invalid:linkname' },
    { name: 'GNU magic', body: archive(withField(257, 'ustar  \0')), verdict: 'registration_invalid:magic' },
    { name: 'no magic (v7)', body: archive(withField(257, '\0\0\0\0\0\0\0\0')), verdict: 'registration_invalid:magic' },
    { name: 'another version', body: archive(withField(263, '01')), verdict: 'registration_invalid:version' },
    { name: 'a user name', body: archive(withField(265, 'root')), verdict: 'registration_invalid:uname' },
    { name: 'a group name', body: archive(withField(297, 'root')), verdict: 'registration_invalid:gname' },
    { name: 'a device major', body: archive(withField(329, '0000001\0')), verdict: 'registration_invalid:devmajor' },
    { name: 'a device minor', body: archive(withField(337, '0000001\0')), verdict: 'registration_invalid:devminor' },
    { name: 'a prefix (a directory to write into)', body: archive(withField(345, 'etc')), verdict: 'registration_invalid:prefix' },
    { name: 'a byte past the prefix', body: archive(withField(510, 'x')), verdict: 'registration_invalid:padding' },
    { name: 'a wrong checksum', body: badChecksum, verdict: 'registration_invalid:checksum' },
  ];
  judge(t, rows);
});

t.test('framing: one entry, zero padding, exactly two zero blocks, nothing after', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const good = tarOf('s0.json', CONTENT);
  const dirty = Buffer.from(good);
  dirty[512 + CONTENT.length] = 0x20;
  const second = Buffer.concat([good.subarray(0, good.length - 1024), tarOf('s1.json', CONTENT)]);
  const rows: Row[] = [
    { name: 'one more zero block', body: Buffer.concat([good, Buffer.alloc(512)]), verdict: 'registration_invalid:length' },
    { name: 'one end block only', body: good.subarray(0, good.length - 512), verdict: 'registration_invalid:length' },
    { name: 'a byte more', body: Buffer.concat([good, Buffer.alloc(1)]), verdict: 'registration_invalid:length' },
    { name: 'a second entry', body: second, verdict: 'registration_invalid:length' },
    { name: 'a byte in the padding', body: dirty, verdict: 'registration_invalid:padding' },
    { name: 'a byte in an end block', body: Buffer.concat([good.subarray(0, good.length - 1), Buffer.from('x')]), verdict: 'registration_invalid:padding' },
    { name: 'the header alone', body: good.subarray(0, 512), verdict: 'registration_invalid:length' },
    { name: 'empty', body: Buffer.alloc(0), verdict: 'registration_invalid:length' },
    { name: 'gzip (dockerd would unpack it)', body: gzipSync(good), verdict: 'registration_invalid:length' },
    { name: 'gzip padded to whole blocks', body: Buffer.concat([gzipSync(good), Buffer.alloc(2048 - gzipSync(good).length)]), verdict: 'registration_invalid:name' },
    { name: 'the workspace-owner archive', body: Buffer.concat([Buffer.from('/'), Buffer.alloc(1535)]), verdict: 'registration_invalid:length' },
  ];
  judge(t, rows);
});

t.test('content: the registration schema exactly, in compact JSON', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const content = (text: string) => tarOf('s0.json', text);
  const P = 'registration_invalid:content';
  const rows: Row[] = [
    { name: 'vacant', body: content('{"vacant":true,"version":1}\n'), verdict: 'ok' },
    { name: 'vacant with a sandbox', body: content('{"version":1,"vacant":true,"sandbox":"x"}\n'), verdict: `${P}.vacant` },
    { name: 'vacant false', body: content('{"version":1,"vacant":false}\n'), verdict: `${P}.vacant` },
    { name: 'no newline', body: content(CONTENT.slice(0, -1)), verdict: P },
    { name: 'whitespace', body: content(CONTENT.replace(':', ': ')), verdict: `${P}.spelling` },
    { name: 'pretty-printed', body: content(`${JSON.stringify(BASE, null, 2)}\n`), verdict: `${P}.spelling` },
    { name: 'an escaped slash', body: content(CONTENT.replace('"/repos', '"\\/repos')), verdict: `${P}.spelling` },
    { name: 'a \\u escape', body: content(CONTENT.replace('cap-7F3a', 'cap-\\u0037F3a')), verdict: `${P}.body_not_ascii` },
    { name: 'a byte above ASCII', body: content(CONTENT.replace('api.example.com', 'api.exämple.com')), verdict: `${P}.body_not_ascii` },
    { name: 'a NUL', body: content(CONTENT.replace('cap-7F3a', 'cap-\u00007f3a')), verdict: `${P}.control_byte` },
    { name: 'YAML, not JSON', body: content('version: 1\nvacant: true\n'), verdict: `${P}.body_not_object` },
    { name: 'two values', body: content('{"version":1,"vacant":true}{}\n'), verdict: `${P}.body_not_json` },
    { name: 'a key twice', body: content(CONTENT.replace('{"version":1,', '{"version":1,"version":1,')), verdict: `${P}.version` },
    { name: 'an unknown key', body: content(changed((v) => { v.extra = 1; })), verdict: `${P}.extra` },
    { name: 'a key in another case', body: content(CONTENT.replace('"sandbox"', '"Sandbox"')), verdict: `${P}.Sandbox` },
    { name: 'version 2', body: content(changed((v) => { v.version = 2; })), verdict: `${P}.version` },
    { name: 'version 1.0', body: content(CONTENT.replace('{"version":1,', '{"version":1.0,')), verdict: `${P}.version` },
    { name: 'no version', body: content(changed((v) => { delete v.version; })), verdict: `${P}.version` },
    { name: 'no policy', body: content(changed((v) => { delete (v as Record<string, unknown>).policy; })), verdict: `${P}.policy` },
    { name: 'no lifecycle', body: content(changed((v) => { delete v.lifecycle; })), verdict: `${P}.lifecycle` },
    { name: 'a sandbox name with a space', body: content(changed((v) => { v.sandbox = 'cap x'; })), verdict: `${P}.sandbox` },
    { name: 'a sandbox name starting with "-"', body: content(changed((v) => { v.sandbox = '-cap'; })), verdict: `${P}.sandbox` },
    { name: 'a sandbox name of 64', body: content(changed((v) => { v.sandbox = 'a'.repeat(64); })), verdict: `${P}.sandbox` },
    { name: 'a lifecycle of 7', body: content(changed((v) => { v.lifecycle = 'abcdefg'; })), verdict: `${P}.lifecycle` },
    { name: 'a lifecycle with "_"', body: content(changed((v) => { v.lifecycle = 'abcd_efgh'; })), verdict: `${P}.lifecycle` },
    { name: 'a subnet with host bits', body: content(changed((v) => { v.subnet = '172.16.0.1/16'; })), verdict: `${P}.subnet` },
    { name: 'a /15', body: content(changed((v) => { v.subnet = '172.16.0.0/15'; })), verdict: `${P}.subnet` },
    { name: 'a /31', body: content(changed((v) => { v.subnet = '172.16.0.0/31'; })), verdict: `${P}.subnet` },
    { name: 'a leading zero in the subnet', body: content(changed((v) => { v.subnet = '172.016.0.0/16'; })), verdict: `${P}.subnet` },
    { name: 'a leading zero in the prefix', body: content(changed((v) => { v.subnet = '172.16.0.0/016'; })), verdict: `${P}.subnet` },
    { name: 'an IPv6 subnet', body: content(changed((v) => { v.subnet = 'fd00::/64'; })), verdict: `${P}.subnet` },
    { name: 'the network address', body: content(changed((v) => { v.address = '172.16.0.0'; })), verdict: `${P}.address` },
    { name: 'the broadcast address', body: content(changed((v) => { v.address = '172.16.255.255'; })), verdict: `${P}.address` },
    { name: 'an address outside', body: content(changed((v) => { v.address = '172.17.0.1'; })), verdict: `${P}.address` },
    { name: 'an octet over 255', body: content(changed((v) => { v.address = '172.16.0.256'; })), verdict: `${P}.address` },
    { name: 'inspect', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a.example', inspect: true }]; })), verdict: `${P}.policy.allowHosts.inspect` },
    { name: 'secrets', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a.example', secrets: [] }]; })), verdict: `${P}.policy.allowHosts.secrets` },
    { name: 'an entry without host', body: content(changed((v) => { v.policy.allowHosts = [{ tunnel: 'tls' }]; })), verdict: `${P}.policy.allowHosts.host` },
    { name: 'a host in upper case', body: content(changed((v) => { v.policy.allowHosts = ['Example.com']; })), verdict: `${P}.policy.allowHosts` },
    { name: 'a host with a port', body: content(changed((v) => { v.policy.allowHosts = ['example.com:443']; })), verdict: `${P}.policy.allowHosts` },
    { name: 'a host of 254', body: content(changed((v) => { v.policy.allowHosts = ['a'.repeat(254)]; })), verdict: `${P}.policy.allowHosts` },
    { name: 'an empty host', body: content(changed((v) => { v.policy.allowHosts = ['']; })), verdict: `${P}.policy.allowHosts` },
    { name: '1,001 hosts', body: content(changed((v) => { v.policy.allowHosts = Array.from({ length: 1001 }, () => 'a'); })), verdict: `${P}.policy.allowHosts` },
    { name: 'a tunnel "raw"', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a', tunnel: 'raw' }]; })), verdict: `${P}.policy.allowHosts.tunnel` },
    { name: 'a method in lower case', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a', methods: ['get'] }]; })), verdict: `${P}.policy.allowHosts.methods` },
    { name: 'no methods', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a', methods: [] }]; })), verdict: `${P}.policy.allowHosts.methods` },
    { name: 'a relative path', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a', paths: ['x'] }]; })), verdict: `${P}.policy.allowHosts.paths` },
    { name: 'a path with a quote', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a', paths: ['/"'] }]; })), verdict: `${P}.policy.allowHosts.paths` },
    { name: 'a path with a query', body: content(changed((v) => { v.policy.allowHosts = [{ host: 'a', paths: ['/x?y'] }]; })), verdict: `${P}.policy.allowHosts.paths` },
    { name: 'port 0', body: content(changed((v) => { v.policy.connectPorts = [0]; })), verdict: `${P}.policy.connectPorts` },
    { name: 'port 65536', body: content(changed((v) => { v.policy.connectPorts = [65536]; })), verdict: `${P}.policy.connectPorts` },
    { name: 'a port as text', body: content(changed((v) => { v.policy.connectPorts = ['443']; })), verdict: `${P}.policy.connectPorts` },
    { name: 'no port', body: content(changed((v) => { v.policy.connectPorts = []; })), verdict: `${P}.policy.connectPorts` },
    { name: '65 ports', body: content(changed((v) => { v.policy.connectPorts = Array.from({ length: 65 }, (_, i) => i + 1); })), verdict: `${P}.policy.connectPorts` },
    { name: 'mode "off"', body: content(changed((v) => { v.policy.mode = 'off'; })), verdict: `${P}.policy.mode` },
    { name: 'policy version 2', body: content(changed((v) => { v.policy.version = 2; })), verdict: `${P}.policy.version` },
    { name: 'no allowHosts', body: content(changed((v) => { delete v.policy.allowHosts; })), verdict: `${P}.policy.allowHosts` },
    { name: 'a null', body: content(changed((v) => { v.policy.mode = null; })), verdict: `${P}.policy.mode` },
  ];
  judge(t, rows);
});
