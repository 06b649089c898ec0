/**
 * The deployment CA the egress proxies of inspected hosts sign their leaves with, kept by the
 * controller in one file of its state directory: `deployment-ca.pem`, the certificate and the
 * private key, mode 0600, in a directory of mode 0700, both the controller user's. Created on
 * first use (common/certificate-authority.ts: ECDSA P-256, no openssl); a group- or
 * other-readable directory or file, a symlink, or another user's is refused, never used or fixed:
 * whoever reads the key can sign for any host every inspected sandbox trusts. Two controllers
 * creating it at once agree: each writes its own temporary file and links it into place, and
 * the one that finds the name taken reads the other's.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, linkSync, lstatSync, mkdirSync, openSync, unlinkSync, writeFileSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { createAuthority, decodeInline, isCodedError, readRegularFile, type Authority } from '../../common/index.js';
import { SandboxError } from '../spec/index.js';

export const CA_FILE_NAME = 'deployment-ca.pem';
const CA_COMMON_NAME = 'capybara-sandbox deployment CA';
/** A certificate and its key are about a kilobyte: a larger file is no deployment CA. */
const MAX_CA_BYTES = 64 * 1024;

function refuse(message: string, cause?: unknown): SandboxError {
  return new SandboxError('invalid_config', message, cause === undefined ? undefined : { cause });
}

function notKind(path: string, kind: 'directory' | 'file'): SandboxError {
  return refuse(`stateDir: ${path} is not a ${kind} (a symlink is refused too); the deployment CA is kept in a ${kind} of the controller's own`);
}

/** Only the controller's user may open it: its own, no group or other bits (`st` is the opened descriptor's: a symlink was refused by O_NOFOLLOW). */
function requirePrivate(path: string, st: Stats, kind: 'directory' | 'file'): void {
  if (!(kind === 'directory' ? st.isDirectory() : st.isFile())) throw notKind(path, kind);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) throw refuse(`stateDir: ${path} belongs to uid ${st.uid}, not to the controller's uid ${uid}: chown it, or choose another stateDir`);
  if ((st.mode & 0o077) !== 0) {
    const mode = (st.mode & 0o777).toString(8).padStart(4, '0');
    throw refuse(`stateDir: ${path} has mode ${mode}: group or others could read the deployment CA's key; chmod ${kind === 'directory' ? '700' : '600'} ${path}`);
  }
}

function statOrUndefined(path: string, shown = path): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw refuse(`stateDir: cannot read ${shown}: ${(err as Error).message}`, err);
  }
}

/**
 * The CA in `path` (`shown` in messages), read through the descriptor the checks were made on:
 * opened without following a link, so a file swapped for a link to another after a check by name
 * is never read.
 */
async function parseStored(path: string, shown: string): Promise<Authority> {
  let text: string;
  try {
    text = readRegularFile(path, { maxBytes: MAX_CA_BYTES, noFollow: true, check: (st) => requirePrivate(shown, st, 'file') }).toString('utf8');
  } catch (err) {
    if (isCodedError(err, 'SandboxError')) throw err;
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw notKind(shown, 'file');
    throw refuse(`stateDir: cannot read ${shown}: ${(err as Error).message}; move it away to have a new CA made (every sandbox made after trusts the new one)`, err);
  }
  try {
    return await decodeInline(Buffer.from(text, 'utf8').toString('base64'));
  } catch (err) {
    throw refuse(`stateDir: ${shown} is no deployment CA (${(err as Error).message}); move it away to have a new CA made (every sandbox made after trusts the new one)`, err);
  }
}

/**
 * The state directory, opened without following a link and checked on its descriptor, which
 * every later read and write goes through (/proc/self/fd/N): a directory swapped in after the
 * check, by whoever can write one of its parents, is never used.
 */
function openStateDir(stateDir: string): number {
  let fd: number;
  try {
    fd = openSync(stateDir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') throw notKind(stateDir, 'directory');
    throw refuse(`stateDir: cannot read ${stateDir}: ${(err as Error).message}`, err);
  }
  try {
    requirePrivate(stateDir, fstatSync(fd), 'directory');
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return fd;
}

/** The CA of `stateDir`, made there on first use. */
export async function loadDeploymentCa(stateDir: string): Promise<Authority> {
  if (statOrUndefined(stateDir) === undefined) {
    try {
      mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    } catch (err) {
      throw refuse(`stateDir: cannot create ${stateDir}: ${(err as Error).message}`, err);
    }
  }
  const dirFd = openStateDir(stateDir);
  try {
    const at = process.platform === 'linux' ? `/proc/self/fd/${dirFd}` : stateDir;
    const file = join(stateDir, CA_FILE_NAME);
    if (statOrUndefined(join(at, CA_FILE_NAME), file) === undefined) {
      const made = await createAuthority({ commonName: CA_COMMON_NAME });
      const temp = join(at, `.${CA_FILE_NAME}.${randomBytes(8).toString('hex')}`);
      writeFileSync(temp, made.certificatePem + made.keyPem, { mode: 0o600, flag: 'wx' });
      try {
        linkSync(temp, join(at, CA_FILE_NAME));
      } catch (err) {
        // Another controller linked its CA first: that one is the deployment's.
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw refuse(`stateDir: cannot write ${file}: ${(err as Error).message}`, err);
      } finally {
        unlinkSync(temp);
      }
    }
    return await parseStored(join(at, CA_FILE_NAME), file);
  } finally {
    closeSync(dirFd);
  }
}
