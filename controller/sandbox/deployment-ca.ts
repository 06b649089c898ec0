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
import { linkSync, lstatSync, mkdirSync, unlinkSync, writeFileSync, type Stats } from 'node:fs';
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

/** Only the controller's user may open it: its own, no group or other bits, not a symlink. */
function requirePrivate(path: string, st: Stats, kind: 'directory' | 'file'): void {
  const isKind = kind === 'directory' ? st.isDirectory() : st.isFile();
  if (st.isSymbolicLink() || !isKind) throw notKind(path, kind);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) throw refuse(`stateDir: ${path} belongs to uid ${st.uid}, not to the controller's uid ${uid}: chown it, or choose another stateDir`);
  if ((st.mode & 0o077) !== 0) {
    const mode = (st.mode & 0o777).toString(8).padStart(4, '0');
    throw refuse(`stateDir: ${path} has mode ${mode}: group or others could read the deployment CA's key; chmod ${kind === 'directory' ? '700' : '600'} ${path}`);
  }
}

function statOrUndefined(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw refuse(`stateDir: cannot read ${path}: ${(err as Error).message}`, err);
  }
}

/**
 * The CA in `path`, read through the descriptor the checks were made on: opened without following
 * a link, so a file swapped for a link to another after a check by name is never read.
 */
async function parseStored(path: string): Promise<Authority> {
  let text: string;
  try {
    text = readRegularFile(path, { maxBytes: MAX_CA_BYTES, noFollow: true, check: (st) => requirePrivate(path, st, 'file') }).toString('utf8');
  } catch (err) {
    if (isCodedError(err, 'SandboxError')) throw err;
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw notKind(path, 'file');
    throw refuse(`stateDir: cannot read ${path}: ${(err as Error).message}; move it away to have a new CA made (every sandbox made after trusts the new one)`, err);
  }
  try {
    return await decodeInline(Buffer.from(text, 'utf8').toString('base64'));
  } catch (err) {
    throw refuse(`stateDir: ${path} is no deployment CA (${(err as Error).message}); move it away to have a new CA made (every sandbox made after trusts the new one)`, err);
  }
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
  requirePrivate(stateDir, lstatSync(stateDir), 'directory');
  const file = join(stateDir, CA_FILE_NAME);
  if (statOrUndefined(file) === undefined) {
    const made = await createAuthority({ commonName: CA_COMMON_NAME });
    const temp = join(stateDir, `.${CA_FILE_NAME}.${randomBytes(8).toString('hex')}`);
    writeFileSync(temp, made.certificatePem + made.keyPem, { mode: 0o600, flag: 'wx' });
    try {
      linkSync(temp, file);
    } catch (err) {
      // Another controller linked its CA first: that one is the deployment's.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw refuse(`stateDir: cannot write ${file}: ${(err as Error).message}`, err);
    } finally {
      unlinkSync(temp);
    }
  }
  return parseStored(file);
}
