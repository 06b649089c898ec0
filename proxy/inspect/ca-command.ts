/**
 * `capybara-egress ca [--ca-dir DIR] [--rotate] [--inline]`: prints the deployment CA's certificate
 * (making the CA when the directory holds none), or with --rotate replaces it, or with --inline
 * prints the EGRESS_CA_INLINE value (certificate and key) for a Kubernetes Secret. Exit 0 with the
 * output on stdout and notes on stderr; 1 when the CA cannot be read or made; 2 for a usage error.
 */
import { parseArgs } from 'node:util';
import type { Writable } from 'node:stream';
import { EGRESS_ENV, encodeInline, isCodedError } from '../../common/index.js';
import { caSource } from './ca-source.js';
import { loadAuthority, rotateAuthority } from './ca-store.js';

export const CA_USAGE = [
  'usage: capybara-egress ca [--ca-dir DIR] [--rotate] [--inline]',
  '',
  'Prints the deployment CA certificate (PEM) that sandboxes trust for inspected hosts, and makes',
  `the CA in DIR when it holds none (default: ${EGRESS_ENV.caDir}, else /var/lib/capybara-egress/ca).`,
  `With ${EGRESS_ENV.caInline} set (and no --ca-dir), prints that CA's certificate instead.`,
  '',
  '  --ca-dir DIR   the CA directory (owned by the proxy user, mode 0700; ca.crt and ca.key)',
  '  --rotate       make a new CA in DIR, replacing the old one; running proxies take it on',
  '                 SIGHUP or restart, and sandboxes must trust the new certificate',
  `  --inline       print the ${EGRESS_ENV.caInline} value instead (base64 of certificate and KEY):`,
  '                 for a Kubernetes Secret, e.g. kubectl create secret generic capybara-egress-ca',
  `                 --from-literal=${EGRESS_ENV.caInline}="$(capybara-egress ca --inline)"; keep it secret`,
].join('\n');

export interface CaIo {
  readonly stdout: Writable;
  readonly stderr: Writable;
  readonly env: NodeJS.ProcessEnv;
}

/** Runs the command; resolves to its exit status. */
export async function runCa(args: readonly string[], io: CaIo): Promise<number> {
  let values: { 'ca-dir'?: string; rotate?: boolean; inline?: boolean; help?: boolean };
  try {
    ({ values } = parseArgs({ args: [...args], options: { 'ca-dir': { type: 'string' }, rotate: { type: 'boolean' }, inline: { type: 'boolean' }, help: { type: 'boolean' } }, strict: true, allowPositionals: false }));
  } catch (err) {
    io.stderr.write(`capybara-egress ca: ${(err as Error).message}\n${CA_USAGE}\n`);
    return 2;
  }
  if (values.help === true) {
    io.stdout.write(`${CA_USAGE}\n`);
    return 0;
  }
  const source = caSource(values['ca-dir'], io.env);
  if (!source.ok) {
    io.stderr.write(`capybara-egress ca: ${source.problem}\n`);
    return 2;
  }
  if (values.rotate === true && source.source.kind === 'inline') {
    io.stderr.write(`capybara-egress ca: --rotate makes a CA in a directory, and ${EGRESS_ENV.caInline} is set: make a new value with \`capybara-egress ca --rotate --inline --ca-dir DIR\` and replace the Secret\n`);
    return 2;
  }
  try {
    const where = source.source.kind === 'dir' ? source.source.dir : source.source.from;
    let authority;
    if (values.rotate === true && source.source.kind === 'dir') {
      authority = await rotateAuthority(source.source.dir, source.source.from);
      io.stderr.write(`capybara-egress ca: a new CA in ${where} (${authority.fingerprint}); running proxies take it on SIGHUP or restart, and sandboxes must trust the new certificate\n`);
    } else {
      const loaded = await loadAuthority(source.source);
      authority = loaded.authority;
      if (loaded.created) io.stderr.write(`capybara-egress ca: made a new CA in ${where} (${authority.fingerprint})\n`);
    }
    io.stdout.write(values.inline === true ? `${encodeInline(authority)}\n` : authority.certificatePem);
    return 0;
  } catch (err) {
    if (!isCodedError(err, 'CodedError') && typeof (err as NodeJS.ErrnoException).code !== 'string') throw err;
    io.stderr.write(`capybara-egress ca: ${(err as Error).message}\n`);
    return 1;
  }
}
