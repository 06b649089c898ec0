/**
 * How a sandbox with inspected hosts comes to trust the deployment CA: a root-owned tmpfs at
 * /etc/capybara (0755: the sandbox user, uid 1000, reads it and cannot write it), which the
 * sandbox's root idle process fills at every start from CAPYBARA_CA_CERT (the CA certificate,
 * base64; public): ca.pem, and ca-bundle.pem, the image's system bundle followed by the CA. A
 * tmpfs is empty at each start, so a restarted or rebuilt container writes it again; ca.pem is
 * written last, so its presence says the bundle is whole (the egress wait checks it). The CA key
 * never enters the sandbox.
 */
import { CA_BUNDLE_FILE, CA_CERT_ENV, CA_DIR, CA_FILE } from '../spec/index.js';

/** The system bundle of Debian and Ubuntu images (the sandbox image's); absent elsewhere: the CA alone. */
const SYSTEM_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/** The tmpfs the CA files are written to: root's, readable by all; 1 MiB (Debian's bundle is about 220 KiB). */
export const CA_TMPFS: Readonly<Record<string, string>> = Object.freeze({ [CA_DIR]: 'rw,noexec,nosuid,nodev,size=1048576,mode=0755' });

/**
 * The shell text, run as root before the idle process: a failure stops the container (the create
 * fails, never a sandbox that half-trusts). `$CAPYBARA_CA_CERT` is quoted throughout and only
 * ever decoded, never run.
 */
export const CA_WRITE_SCRIPT = [
  `chmod 0755 ${CA_DIR}`,
  'umask 022',
  `{ cat ${SYSTEM_BUNDLE} 2>/dev/null || :; printf '%s' "$${CA_CERT_ENV}" | base64 -d; } > ${CA_BUNDLE_FILE}`,
  `printf '%s' "$${CA_CERT_ENV}" | base64 -d > ${CA_FILE}.new`,
  `mv ${CA_FILE}.new ${CA_FILE}`,
].join(' && ');

/** Whether a container environment (NAME=value list) carries the CA for its idle process. */
export function carriesCa(env: readonly string[]): boolean {
  return env.some((e) => e.startsWith(`${CA_CERT_ENV}=`));
}
