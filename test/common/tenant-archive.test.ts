/**
 * The registration archive the controller puts into an egress container: one ustar header of a
 * regular file `<slot>.json`, laid out field by field as the socket proxy rebuilds it, and a
 * content the egress's own parser (policy/tenants.ts parseSlotFile) reads back as the same
 * registration. GNU tar, an independent reader, lists exactly that one file.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { isCodedError, registrationArchive, REGISTRATION_MAX_BYTES, TENANTS_DIR, type SlotFileValue } from '../../common/index.js';
import { MTIME, REGISTRATIONS } from '../haproxy/registrations.js';
import { parseSlotFile } from '../../policy/index.js';
import { toolMissing, needUnmet } from '../support/needs.js';



function field(archive: Buffer, offset: number, length: number): string {
  return archive.subarray(offset, offset + length).toString('latin1');
}

t.test('the header, field by field; the content; padding; two zero blocks', async (t) => {
  const value = REGISTRATIONS[0]!.value;
  const archive = registrationArchive('s0', value, MTIME);
  const content = `${JSON.stringify(value)}\n`;
  t.equal(archive.length, 512 + Math.ceil(content.length / 512) * 512 + 1024, 'header, content blocks, two end blocks');
  t.equal(field(archive, 0, 100), `s0.json${'\0'.repeat(93)}`, 'name');
  t.equal(field(archive, 100, 8), '0000644\0', 'mode');
  t.equal(field(archive, 108, 8), '0000000\0', 'uid');
  t.equal(field(archive, 116, 8), '0000000\0', 'gid');
  t.equal(field(archive, 124, 12), `${content.length.toString(8).padStart(11, '0')}\0`, 'size');
  t.equal(field(archive, 136, 12), `${MTIME.toString(8).padStart(11, '0')}\0`, 'mtime');
  t.equal(field(archive, 156, 1), '0', 'a regular file');
  t.equal(field(archive, 157, 100), '\0'.repeat(100), 'no link name');
  t.equal(field(archive, 257, 8), 'ustar\x0000', 'ustar magic and version');
  t.equal(field(archive, 265, 64), '\0'.repeat(64), 'no user or group name');
  t.equal(field(archive, 345, 167), '\0'.repeat(167), 'no prefix');
  const blanked = Buffer.from(archive.subarray(0, 512));
  blanked.write(' '.repeat(8), 148, 'latin1');
  const sum = blanked.reduce((a, b) => a + b, 0);
  t.equal(field(archive, 148, 8), `${sum.toString(8).padStart(6, '0')}\0 `, 'checksum');
  t.equal(archive.subarray(512, 512 + content.length).toString('utf8'), content, 'compact JSON and a newline');
  t.ok(archive.subarray(512 + content.length).every((b) => b === 0), 'zero padding and end blocks');
  const now = Math.floor(Date.now() / 1000);
  const stamped = parseInt(field(registrationArchive('s0', value), 136, 11), 8);
  t.ok(stamped >= now && stamped <= now + 2, 'the mtime defaults to now');
  t.equal(TENANTS_DIR, '/var/lib/capybara-egress/tenants');
});

t.test('every archive parses back through the egress\'s parser to the same registration', async (t) => {
  for (const { name, slot, value } of REGISTRATIONS) {
    const archive = registrationArchive(slot, value, MTIME);
    const size = parseInt(field(archive, 124, 11), 8);
    const text = archive.subarray(512, 512 + size).toString('utf8');
    const parsed = parseSlotFile(text, `${slot}.json`);
    if ('vacant' in value) {
      t.same(parsed, { vacant: true }, name);
      continue;
    }
    if (parsed.vacant) {
      t.fail(`${name}: read as vacant`);
      continue;
    }
    t.same(
      { sandbox: parsed.sandbox, lifecycle: parsed.lifecycle, subnet: parsed.subnet.text, address: parsed.address, allowHosts: parsed.policy.allowHosts, mode: parsed.policy.mode },
      { sandbox: value.sandbox, lifecycle: value.lifecycle, subnet: value.subnet, address: value.address, allowHosts: value.policy.allowHosts, mode: value.policy.mode },
      name,
    );
    if (value.policy.connectPorts) t.same(parsed.policy.connectPorts, value.policy.connectPorts, `${name}: ports`);
  }
});

t.test('GNU tar reads one regular file of that name, mode and owner, and its content', async (t) => {
  const missing = toolMissing('tar', ['--version'], 'apt-get install tar');
  if (missing !== undefined) return needUnmet(t, missing);
  for (const { name, slot, value } of REGISTRATIONS) {
    const archive = registrationArchive(slot, value, MTIME);
    const list = spawnSync('tar', ['-tv', '--numeric-owner', '--full-time', '-f', '-'], { input: archive, env: { ...process.env, TZ: 'UTC' } });
    t.equal(list.status, 0, `${name}: tar reads it (${list.stderr.toString('utf8')})`);
    t.match(list.stdout.toString('utf8'), new RegExp(`^-rw-r--r-- 0/0 +\\d+ 2026-01-01 00:00:00 ${slot.replace(/\./g, '\\.')}\\.json\\n$`), `${name}: one entry`);
    const out = spawnSync('tar', ['-xO', '-f', '-'], { input: archive });
    t.equal(out.stdout.toString('utf8'), `${JSON.stringify(value)}\n`, `${name}: its content`);
  }
});

t.test('refused: a slot outside the alphabet, a registration over the socket proxy\'s body cap', async (t) => {
  const value = REGISTRATIONS[0]!.value;
  for (const slot of ['', '../x', 'a/b', '.hidden', '-a', 'A', 'a'.repeat(64), 'a b', 'a\0', 'é']) {
    let err: unknown;
    try {
      registrationArchive(slot, value, MTIME);
    } catch (e) {
      err = e;
    }
    t.ok(isCodedError(err, 'RegistrationArchiveError') && err.code === 'invalid_registration', `${JSON.stringify(slot)}: invalid_registration`);
  }
  t.throws(() => registrationArchive('s0', value, -1), /not a file time/);
  t.throws(() => registrationArchive('s0', value, 8 ** 11), /not a file time/);
  const many = { ...value, policy: { allowHosts: Array.from({ length: 2000 }, (_, i) => `host-${i}.example.com`) } } as SlotFileValue;
  t.throws(() => registrationArchive('s0', many, MTIME), new RegExp(`over the ${REGISTRATION_MAX_BYTES}`));
  const fits = { ...value, policy: { allowHosts: Array.from({ length: 1000 }, (_, i) => `h${i}.example.com`) } } as SlotFileValue;
  t.ok(registrationArchive('s0', fits, MTIME).length <= 32 * 1024, 'a thousand short hosts fit the socket proxy\'s body cap');
});
