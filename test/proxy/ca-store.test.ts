/**
 * Where the deployment CA is kept: made on first use in a directory of the proxy's own (0700;
 * ca.crt 0644, ca.key 0600), read back the same, replaced by rotation; refused, with what to run,
 * when the directory or the key is open to others, belongs to someone else or is a link; the
 * inline variable instead of a directory; and a policy without inspected entries never touches it.
 */
import t, { type Test } from 'tap';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, closeSync, constants, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, readlinkSync, renameSync, statSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { createAuthority, encodeInline } from '../../common/index.js';
import { caSource, loadAuthority, loadInspection, MAX_UPSTREAM_CA_BYTES, readUpstreamCa, rotateAuthority, type CaSource } from '../../proxy/inspect/index.js';
import { settle } from '../support/settle.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'egress-ca-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
/** A fresh path under the test's directory (not made). */
const fresh = (): string => path.join(root, `ca-${++n}`);
const dirSource = (dir: string): CaSource => ({ kind: 'dir', dir, from: '--ca-dir' });
const mode = (p: string): number => statSync(p).mode & 0o777;

async function refused(t: Test, promise: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await t.rejects(promise, { code, message }, message.source);
}

t.test('made on first use with the right modes, then read back the same', async (t) => {
  const dir = path.join(fresh(), 'nested', 'ca');
  const first = await loadAuthority(dirSource(dir));
  t.ok(first.created);
  t.equal(mode(dir), 0o700, 'the directory is 0700');
  t.equal(mode(path.join(dir, 'ca.key')), 0o600, 'the key is 0600');
  t.equal(mode(path.join(dir, 'ca.crt')), 0o644, 'the certificate is 0644');
  t.equal(readFileSync(path.join(dir, 'ca.crt'), 'utf8'), first.authority.certificatePem);
  const again = await loadAuthority(dirSource(dir));
  t.notOk(again.created);
  t.equal(again.authority.fingerprint, first.authority.fingerprint);
  t.same(readdir(dir), ['ca.crt', 'ca.key'], 'no temporary file is left');
});

function readdir(dir: string): string[] {
  return readdirSync(dir).sort();
}

t.test('callers racing on an empty directory all get the one CA', async (t) => {
  const dir = fresh();
  const all = await Promise.all(Array.from({ length: 6 }, () => loadAuthority(dirSource(dir))));
  t.equal(new Set(all.map((a) => a.authority.fingerprint)).size, 1, 'one CA');
  t.equal(all.filter((a) => a.created).length, 1, 'made once');
  t.same(readdir(dir), ['ca.crt', 'ca.key']);
});

t.test('without create, an empty or absent directory is an error that says how to make the CA', async (t) => {
  const dir = fresh();
  await refused(t, loadAuthority(dirSource(dir), { create: false }), 'ca_unreadable', /does not exist; make the CA with `capybara-egress ca --ca-dir/);
  t.notOk(existsSync(dir), 'not made');
  mkdirSync(dir, { mode: 0o700 });
  await refused(t, loadAuthority(dirSource(dir), { create: false }), 'ca_unreadable', /holds no CA/);
});

t.test('rotation replaces the pair', async (t) => {
  const dir = fresh();
  const before = (await loadAuthority(dirSource(dir))).authority;
  const after = await rotateAuthority(dir, '--ca-dir');
  t.not(after.fingerprint, before.fingerprint);
  t.equal((await loadAuthority(dirSource(dir))).authority.fingerprint, after.fingerprint);
  t.equal(mode(path.join(dir, 'ca.key')), 0o600);
  t.same(readdir(dir), ['ca.crt', 'ca.key']);
});

t.test('an unsafe directory or key is refused, saying what to chmod or chown', async (t) => {
  const open = fresh();
  mkdirSync(open, { mode: 0o700 });
  chmodSync(open, 0o755);
  await refused(t, loadAuthority(dirSource(open)), 'ca_dir_unsafe', /--ca-dir: .* has mode 0755, open to group or other.*chmod 700/);
  t.same(readdir(open), [], 'nothing was written into it');

  const real = fresh();
  await loadAuthority(dirSource(real));
  const link = fresh();
  symlinkSync(real, link);
  await refused(t, loadAuthority(dirSource(link)), 'ca_dir_unsafe', /is a symbolic link/);

  const file = fresh();
  writeFileSync(file, 'x');
  await refused(t, loadAuthority(dirSource(file)), 'ca_dir_unsafe', /is not a directory/);

  const readableKey = fresh();
  await loadAuthority(dirSource(readableKey));
  chmodSync(path.join(readableKey, 'ca.key'), 0o640);
  await refused(t, loadAuthority(dirSource(readableKey)), 'ca_dir_unsafe', /ca\.key has mode 0640.*chmod 600/);

  const linkedKey = fresh();
  await loadAuthority(dirSource(linkedKey));
  const elsewhere = path.join(root, `key-${n}`);
  writeFileSync(elsewhere, readFileSync(path.join(linkedKey, 'ca.key')), { mode: 0o600 });
  unlinkSync(path.join(linkedKey, 'ca.key'));
  symlinkSync(elsewhere, path.join(linkedKey, 'ca.key'));
  await refused(t, loadAuthority(dirSource(linkedKey)), 'ca_dir_unsafe', /ca\.key is a symbolic link/);

  if (process.getuid?.() === 0) {
    const theirs = fresh();
    mkdirSync(theirs, { mode: 0o700 });
    chownSync(theirs, 12345, 12345);
    await refused(t, loadAuthority(dirSource(theirs)), 'ca_dir_unsafe', /belongs to uid 12345, not to the proxy's user \(uid 0\).*chown 0/);
    const theirKey = fresh();
    await loadAuthority(dirSource(theirKey));
    chownSync(path.join(theirKey, 'ca.key'), 12345, 12345);
    await refused(t, loadAuthority(dirSource(theirKey)), 'ca_dir_unsafe', /ca\.key belongs to uid 12345/);
  } else {
    t.comment('not root: the other-owner cases need chown');
  }
});

t.test('a pair that does not match, or half a pair, is refused after a moment, saying how to start over', async (t) => {
  const dir = fresh();
  await loadAuthority(dirSource(dir));
  const other = await createAuthority();
  writeFileSync(path.join(dir, 'ca.crt'), other.certificatePem);
  const started = Date.now();
  await refused(t, loadAuthority(dirSource(dir)), 'ca_invalid', /does not belong to the CA certificate.*capybara-egress ca --rotate --ca-dir/);
  t.ok(Date.now() - started >= 1_500, 'it waited for a writer to finish first');
  unlinkSync(path.join(dir, 'ca.crt'));
  await refused(t, loadAuthority(dirSource(dir)), 'ca_invalid', /ca\.crt is missing/);
  t.notOk(existsSync(path.join(dir, 'ca.crt')), 'a half pair is not "repaired" with a new certificate');
});

t.test('the inline variable: its CA, or an error naming the variable', async (t) => {
  const ca = await createAuthority();
  const inline: CaSource = { kind: 'inline', value: encodeInline(ca), from: 'EGRESS_CA_INLINE' };
  t.equal((await loadAuthority(inline)).authority.fingerprint, ca.fingerprint);
  await refused(t, loadAuthority({ ...inline, value: 'x' }), 'ca_invalid', /^EGRESS_CA_INLINE: the inline CA is not base64/);
});

t.test('the source: inline, else --ca-dir, else EGRESS_CA_DIR, else the default; inline with a directory is refused', async (t) => {
  const rows: Array<[string, string | undefined, NodeJS.ProcessEnv, unknown]> = [
    ['the default', undefined, {}, { ok: true, source: { kind: 'dir', dir: '/var/lib/capybara-egress/ca', from: 'the default CA directory' } }],
    ['the variable', undefined, { EGRESS_CA_DIR: '/x/ca' }, { ok: true, source: { kind: 'dir', dir: '/x/ca', from: 'EGRESS_CA_DIR' } }],
    ['the flag wins', '/y/ca', { EGRESS_CA_DIR: '/x/ca' }, { ok: true, source: { kind: 'dir', dir: '/y/ca', from: '--ca-dir' } }],
    ['a relative flag is made absolute', 'rel', {}, { ok: true, source: { kind: 'dir', dir: path.resolve('rel'), from: '--ca-dir' } }],
    ['inline', undefined, { EGRESS_CA_INLINE: 'abc' }, { ok: true, source: { kind: 'inline', value: 'abc', from: 'EGRESS_CA_INLINE' } }],
    ['an empty inline is unset', undefined, { EGRESS_CA_INLINE: '' }, { ok: true, source: { kind: 'dir', dir: '/var/lib/capybara-egress/ca', from: 'the default CA directory' } }],
  ];
  for (const [name, flag, env, expected] of rows) t.same(caSource(flag, env), expected, name);
  t.match(caSource('/d', { EGRESS_CA_INLINE: 'abc' }), { ok: false, problem: /both EGRESS_CA_INLINE and --ca-dir are set/ });
  t.match(caSource(undefined, { EGRESS_CA_INLINE: 'abc', EGRESS_CA_DIR: '/d' }), { ok: false, problem: /both EGRESS_CA_INLINE and EGRESS_CA_DIR/ });
  // path.resolve('') is the working directory: `--ca-dir=` would keep the CA key wherever the proxy was started.
  t.same(caSource('', {}), { ok: false, problem: '--ca-dir is empty: give the CA directory, or leave the flag out for the default (/var/lib/capybara-egress/ca)' }, 'an empty flag is refused');
});

t.test('inspection: none without inspected entries (no directory made), the CA and upstream roots with them', async (t) => {
  const dir = fresh();
  const upstream = { path: undefined, from: '--upstream-ca' };
  t.equal(await loadInspection([], dirSource(dir), upstream), undefined);
  t.notOk(existsSync(dir), 'a proxy that inspects nothing makes no CA');
  const first = await loadInspection(['api.test'], dirSource(dir), upstream);
  t.ok(first && first.upstreamCa.length > 0, 'upstream roots');
  t.equal(first?.leaves.caCertificatePem, readFileSync(path.join(dir, 'ca.crt'), 'utf8'));
  const same = await loadInspection(['api.test'], dirSource(dir), upstream, first);
  t.equal(same?.leaves, first?.leaves, 'an unchanged CA keeps its issuer (and its cached leaves)');
  await rotateAuthority(dir, '--ca-dir');
  const rotated = await loadInspection(['api.test'], dirSource(dir), upstream, first);
  t.not(rotated?.leaves, first?.leaves, 'a rotated CA gets a new issuer');
  t.not(rotated?.fingerprint, first?.fingerprint);
  const bad = fresh();
  mkdirSync(bad, { mode: 0o755 });
  chmodSync(bad, 0o755);
  await t.rejects(loadInspection(['api.test', '*.b.test'], dirSource(bad), upstream), { code: 'ca_unavailable', message: /^the policy inspects api\.test, \*\.b\.test, which needs the deployment CA, and --ca-dir: .*chmod 700/ });
});

t.test('the upstream roots: a given bundle, else the system bundle, else Node\'s; a file with no certificate is refused', async (t) => {
  const ca = await createAuthority();
  const bundle = path.join(root, 'bundle.pem');
  writeFileSync(bundle, `comment\n${ca.certificatePem}`);
  t.same(readUpstreamCa({ path: bundle, from: '--upstream-ca' }), [ca.certificatePem]);
  const empty = path.join(root, 'empty.pem');
  writeFileSync(empty, 'no certificates here\n');
  t.throws(() => readUpstreamCa({ path: empty, from: 'EGRESS_UPSTREAM_CA' }), { code: 'upstream_ca_invalid', message: /^EGRESS_UPSTREAM_CA: .*empty\.pem holds no PEM certificate/ });
  const broken = path.join(root, 'broken.pem');
  writeFileSync(broken, `${ca.certificatePem}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n`);
  t.throws(() => readUpstreamCa({ path: broken, from: '--upstream-ca' }), { message: /certificate 2 of 2 in .*broken\.pem cannot be read/ });
  t.throws(() => readUpstreamCa({ path: path.join(root, 'absent.pem'), from: '--upstream-ca' }), { message: /cannot read .*absent\.pem \(ENOENT\)/ });
  // Read bounded: a device, a FIFO or a file past the cap is refused at once, never read whole or waited on.
  t.throws(() => readUpstreamCa({ path: '/dev/zero', from: '--upstream-ca' }), { code: 'upstream_ca_invalid', message: /cannot read \/dev\/zero \(not a regular file/ });
  const fifo = path.join(root, 'fifo.pem');
  execFileSync('mkfifo', [fifo]);
  t.throws(() => readUpstreamCa({ path: fifo, from: '--upstream-ca' }), { message: /cannot read .*fifo\.pem \(not a regular file/ });
  const huge = path.join(root, 'huge.pem');
  writeFileSync(huge, Buffer.alloc(MAX_UPSTREAM_CA_BYTES + 1, 0x41));
  t.throws(() => readUpstreamCa({ path: huge, from: 'EGRESS_UPSTREAM_CA' }), { message: new RegExp(`^EGRESS_UPSTREAM_CA: cannot read .*huge\\.pem \\(larger than ${MAX_UPSTREAM_CA_BYTES} bytes\\)`) });
  const system = readUpstreamCa({ path: undefined, from: '--upstream-ca' }, () => ca.certificatePem);
  t.same(system, [ca.certificatePem], 'the system bundle when readable');
  const fallback = readUpstreamCa({ path: undefined, from: '--upstream-ca' }, () => {
    throw new Error('ENOENT');
  });
  t.equal(fallback, tls.rootCertificates, 'else Node\'s roots');
});

t.test('a directory the proxy cannot write into is an error that says what to do', { skip: process.getuid?.() === 0 ? 'root writes into a read-only directory anyway' : false }, async (t) => {
  const dir = fresh();
  mkdirSync(dir, { mode: 0o700 });
  chmodSync(dir, 0o500);
  await t.rejects(loadAuthority(dirSource(dir)), { code: 'ca_unreadable', message: /cannot write a new CA into .* \(EACCES\): make it writable for the proxy's user/ });
});

t.test('a directory that cannot be made is an error that says what to do', async (t) => {
  const file = fresh();
  writeFileSync(file, 'x');
  await t.rejects(loadAuthority(dirSource(path.join(file, 'ca'))), { code: 'ca_unreadable', message: /cannot read .*ca \(ENOTDIR\): give a directory owned by the proxy's user, mode 0700/ });
});

t.test('a directory swapped after its check (a link, or another directory, put in its place) is never read or written through', async (t) => {
  // Whoever can write the parent can rename the checked directory away and put a link to a
  // directory of theirs in its place: every read and write after the check must stay in the
  // directory that was checked. Here the swap lands while the proxy waits for a half pair.
  const parent = fresh();
  mkdirSync(parent, { mode: 0o700 });
  const dir = path.join(parent, 'ca');
  await loadAuthority(dirSource(dir));
  unlinkSync(path.join(dir, 'ca.crt'));
  const theirs = path.join(parent, 'theirs');
  mkdirSync(theirs, { mode: 0o700 });
  chmodSync(theirs, 0o755);
  const planted = await createAuthority();
  writeFileSync(path.join(theirs, 'ca.key'), planted.keyPem, { mode: 0o600 });
  writeFileSync(path.join(theirs, 'ca.crt'), planted.certificatePem, { mode: 0o644 });
  const loading = loadAuthority(dirSource(dir));
  // The swap lands once the checked directory is held open (a descriptor of this process names
  // it), while the half pair is waited for. After a fixed 300 ms, a loaded machine could swap it
  // before the check, which refuses the link itself: another case (above).
  const held = (): boolean => readdirSync('/proc/self/fd').some((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`) === dir;
    } catch {
      return false;
    }
  });
  await settle(held, 'the directory held open');
  renameSync(dir, path.join(parent, 'moved'));
  symlinkSync(theirs, dir);
  await refused(t, loading, 'ca_invalid', /ca\.crt is missing/);
});

t.test('a CA file that is a FIFO, or larger than 64 KiB, is refused at once, naming it', async (t) => {
  // The directory is checked, but its owner (or root) can still leave a FIFO in it: opened
  // without O_NONBLOCK, a FIFO's open waits for a writer, and the proxy's start with it.
  const dir = fresh();
  await loadAuthority(dirSource(dir));
  const key = path.join(dir, 'ca.key');
  unlinkSync(key);
  execFileSync('mkfifo', ['-m', '600', key]);
  // A blocked open is let go by a writer, so that a failing run still ends (ENXIO: none waits).
  t.teardown(() => {
    try {
      closeSync(openSync(key, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {}
  });
  const hung = new Promise((_, reject) => setTimeout(() => reject(Object.assign(new Error('still waiting on the FIFO after 3 s'), { code: 'hung' })), 3_000).unref());
  await refused(t, Promise.race([loadAuthority(dirSource(dir)), hung]), 'ca_dir_unsafe', /--ca-dir: .*ca\.key is not a plain file/);

  const large = fresh();
  await loadAuthority(dirSource(large));
  writeFileSync(path.join(large, 'ca.crt'), `${readFileSync(path.join(large, 'ca.crt'), 'utf8')}${'#'.repeat(64 * 1024)}`);
  await refused(t, loadAuthority(dirSource(large)), 'ca_invalid', /--ca-dir: .*ca\.crt is larger than 65536 bytes, too large for a CA file/);
});
