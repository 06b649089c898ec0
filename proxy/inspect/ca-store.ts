/**
 * Where the egress keeps the deployment CA: a directory only the proxy's user can enter (ca.crt
 * 0644, ca.key 0600), or the EGRESS_CA_INLINE variable (a Kubernetes Secret). The key is what lets
 * anyone impersonate every inspected host to every sandbox, so the directory is refused unless it
 * is the proxy's own, closed to group and other, and no symlink (a link could point the proxy at
 * a directory someone else controls, or make it write its key there).
 *
 * Creation is race-free: a new pair is written to temporary files, and the key claims its name
 * with link(2), which fails when the name exists (the O_EXCL of a rename). Of two processes
 * starting at once, one makes the CA and the other reads it. A reader that finds a key without its
 * certificate (a creation or rotation under way) reads again for a moment before it gives up.
 */
import { constants, type Stats } from 'node:fs';
import { link, lstat, mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { basename, join } from 'node:path';
import { CodedError, createAuthority, decodeInline, isCodedError, parseAuthority, readRegularFile, type Authority } from '../../common/index.js';

export const DEFAULT_CA_DIR = '/var/lib/capybara-egress/ca';
export const CA_CERT_FILE = 'ca.crt';
export const CA_KEY_FILE = 'ca.key';
/** How long a reader waits for a pair being written by another process to be whole. */
const SETTLE_MS = 2_000;
/** A PEM key or certificate is a few hundred bytes: a larger file is not one. */
const MAX_CA_FILE_BYTES = 64 * 1024;

/** Where the CA comes from: a directory, or the inline variable; `from` names the flag or variable. */
export type CaSource = { readonly kind: 'dir'; readonly dir: string; readonly from: string } | { readonly kind: 'inline'; readonly value: string; readonly from: string };

export type CaStoreErrorCode = 'ca_dir_unsafe' | 'ca_unreadable' | 'ca_invalid';

export class CaStoreError extends CodedError<CaStoreErrorCode> {}

/** The CA from its source; a directory without one gets one (`create`), made as described above. */
export async function loadAuthority(source: CaSource, options: { create: boolean } = { create: true }): Promise<{ authority: Authority; created: boolean }> {
  if (source.kind === 'inline') {
    try {
      return { authority: await decodeInline(source.value), created: false };
    } catch (err) {
      throw new CaStoreError('ca_invalid', `${source.from}: ${(err as Error).message}`, { cause: err });
    }
  }
  const opened = await safeDirectory(source.dir, source.from, options.create);
  try {
    const found = await readPair(opened.at, source.dir, source.from);
    if (found !== undefined) return { authority: found, created: false };
    if (!options.create) throw new CaStoreError('ca_unreadable', `${source.from}: ${source.dir} holds no CA; make one with \`capybara-egress ca --ca-dir ${source.dir}\``);
    const made = await createAuthority();
    const claimed = await writePair(opened.at, made, 'claim').catch((err: NodeJS.ErrnoException) => {
      throw new CaStoreError('ca_unreadable', `${source.from}: cannot write a new CA into ${source.dir} (${err.code ?? err.message}): make it writable for the proxy's user (a volume, in a container with a read-only root), or give the CA in EGRESS_CA_INLINE`, { cause: err });
    });
    if (claimed) return { authority: made, created: true };
    const theirs = await readPair(opened.at, source.dir, source.from);
    if (theirs === undefined) throw new CaStoreError('ca_unreadable', `${source.from}: another process made a CA in ${source.dir} but it cannot be read`);
    return { authority: theirs, created: false };
  } finally {
    await opened.handle.close();
  }
}

/** A new CA in the directory, replacing the old pair (each file by rename, so a reader never sees half a file). */
export async function rotateAuthority(dir: string, from: string): Promise<Authority> {
  const opened = await safeDirectory(dir, from, true);
  try {
    const made = await createAuthority();
    await writePair(opened.at, made, 'replace');
    return made;
  } finally {
    await opened.handle.close();
  }
}

/**
 * The directory exists (made 0700 when `create` allows), is a directory and no link, is ours, and
 * is closed to others; it is opened, and every later read and write goes through that descriptor
 * (`at`), so a directory swapped in after the check (by whoever can write its parent) is never used.
 */
async function safeDirectory(dir: string, from: string, create: boolean): Promise<{ handle: FileHandle; at: string }> {
  let stat = await lstat(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw new CaStoreError('ca_unreadable', `${from}: cannot read ${dir} (${err.code ?? err.message}): give a directory owned by the proxy's user, mode 0700`, { cause: err });
  });
  if (stat === undefined) {
    if (!create) throw new CaStoreError('ca_unreadable', `${from}: ${dir} does not exist; make the CA with \`capybara-egress ca --ca-dir ${dir}\``);
    await mkdir(dir, { recursive: true, mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
      throw new CaStoreError('ca_unreadable', `${from}: cannot make ${dir} (${err.code ?? err.message}): make it (owned by the proxy's user, mode 0700), or give another with --ca-dir DIR`, { cause: err });
    });
    stat = await lstat(dir);
  }
  const uid = process.getuid?.();
  const fix = `chown ${uid ?? '<the proxy user>'} ${dir} && chmod 700 ${dir}`;
  if (stat.isSymbolicLink()) throw new CaStoreError('ca_dir_unsafe', `${from}: ${dir} is a symbolic link; give the real directory, owned by the proxy's user with mode 0700`);
  if (!stat.isDirectory()) throw new CaStoreError('ca_dir_unsafe', `${from}: ${dir} is not a directory`);
  if (uid !== undefined && stat.uid !== uid) throw new CaStoreError('ca_dir_unsafe', `${from}: ${dir} belongs to uid ${stat.uid}, not to the proxy's user (uid ${uid}): the CA key must be the proxy's alone; ${fix}`);
  if ((stat.mode & 0o077) !== 0) throw new CaStoreError('ca_dir_unsafe', `${from}: ${dir} has mode 0${(stat.mode & 0o777).toString(8)}, open to group or other: the CA key must be the proxy's alone; chmod 700 ${dir}`);
  const handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW).catch((err: NodeJS.ErrnoException) => {
    throw new CaStoreError('ca_dir_unsafe', `${from}: ${dir} changed while it was checked (${err.code ?? err.message}); start again`, { cause: err });
  });
  const held = await handle.stat();
  if (held.dev !== stat.dev || held.ino !== stat.ino) {
    await handle.close();
    throw new CaStoreError('ca_dir_unsafe', `${from}: ${dir} was replaced while it was checked; start again`);
  }
  return { handle, at: process.platform === 'linux' ? `/proc/self/fd/${handle.fd}` : dir };
}

/** The pair in the directory, undefined when there is none; a key without its certificate is waited for a moment. */
async function readPair(at: string, dir: string, from: string): Promise<Authority | undefined> {
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const key = readPrivate(at, join(dir, CA_KEY_FILE), from, true);
    const cert = readPrivate(at, join(dir, CA_CERT_FILE), from, false);
    if (key === undefined && cert === undefined) return undefined;
    let problem: unknown;
    if (key !== undefined && cert !== undefined) {
      try {
        return await parseAuthority(cert, key);
      } catch (err) {
        if (!isCodedError(err, 'CodedError')) throw err;
        problem = err;
      }
    }
    if (Date.now() >= deadline) {
      const what = problem !== undefined ? (problem as Error).message : `${key === undefined ? CA_KEY_FILE : CA_CERT_FILE} is missing`;
      throw new CaStoreError('ca_invalid', `${from}: the CA in ${dir}: ${what}; if it cannot be mended, make a new one with \`capybara-egress ca --rotate --ca-dir ${dir}\` (sandboxes must then trust the new certificate)`, { cause: problem });
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * A file's text (`path` in the directory opened at `at`), opened without following a link and
 * without blocking (a FIFO put in the directory is refused, not waited on), read bounded from the
 * descriptor that was checked; a key must be ours and closed to others. Undefined when absent.
 */
function readPrivate(at: string, path: string, from: string, secret: boolean): string | undefined {
  try {
    return readRegularFile(join(at, basename(path)), { maxBytes: MAX_CA_FILE_BYTES, noFollow: true, check: (stat) => checkPrivate(stat, path, from, secret) }).toString('utf8');
  } catch (err) {
    if (isCodedError(err, 'CaStoreError')) throw err;
    if (isCodedError(err, 'RegularFileError')) throw new CaStoreError('ca_invalid', `${from}: ${path} is larger than ${MAX_CA_FILE_BYTES} bytes, too large for a CA file`, { cause: err });
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP') throw new CaStoreError('ca_dir_unsafe', `${from}: ${path} is a symbolic link; the CA files must be plain files`);
    throw new CaStoreError('ca_unreadable', `${from}: cannot read ${path} (${code ?? (err as Error).message})`, { cause: err });
  }
}

/** Checked on the opened descriptor before a byte is read (a FIFO or device is refused here, so only a too-large file remains a RegularFileError). */
function checkPrivate(stat: Stats, path: string, from: string, secret: boolean): void {
  if (!stat.isFile()) throw new CaStoreError('ca_dir_unsafe', `${from}: ${path} is not a plain file`);
  const uid = process.getuid?.();
  if (secret && uid !== undefined && stat.uid !== uid) throw new CaStoreError('ca_dir_unsafe', `${from}: ${path} belongs to uid ${stat.uid}, not to the proxy's user (uid ${uid}); chown ${uid} ${path}`);
  if (secret && (stat.mode & 0o077) !== 0) throw new CaStoreError('ca_dir_unsafe', `${from}: ${path} has mode 0${(stat.mode & 0o777).toString(8)}, open to group or other; chmod 600 ${path}`);
}

/**
 * Writes the pair through temporary files. `claim`: the key takes its name only if it is free
 * (false when another process got there first; nothing of ours is left). `replace`: both names
 * are taken over by rename.
 */
async function writePair(dir: string, authority: Authority, how: 'claim' | 'replace'): Promise<boolean> {
  const tag = `${process.pid}-${randomBytes(6).toString('hex')}`;
  const tmpKey = join(dir, `.${CA_KEY_FILE}.${tag}`);
  const tmpCert = join(dir, `.${CA_CERT_FILE}.${tag}`);
  try {
    await writeNew(tmpKey, authority.keyPem, 0o600);
    await writeNew(tmpCert, authority.certificatePem, 0o644);
    if (how === 'claim') {
      try {
        await link(tmpKey, join(dir, CA_KEY_FILE));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
        throw err;
      }
    } else {
      await rename(tmpKey, join(dir, CA_KEY_FILE));
    }
    await rename(tmpCert, join(dir, CA_CERT_FILE));
    return true;
  } finally {
    await Promise.all([rm(tmpKey, { force: true }), rm(tmpCert, { force: true })]);
  }
}

/** A file that did not exist, with its mode set at creation (no moment when it is readable by others), synced. */
async function writeNew(path: string, text: string, mode: number): Promise<void> {
  const handle = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    await handle.writeFile(text);
    // The umask may have taken bits away from a certificate meant to be world-readable.
    await handle.chmod(mode);
    await handle.sync();
  } finally {
    await handle.close();
  }
}
