/**
 * Throwaway PKI for mTLS tests, made with the openssl command in a fresh temporary directory:
 * a CA, a server certificate for 127.0.0.1, and client certificate directories in the
 * `tlsCertDir` layout (ca.pem, cert.pem, key.pem):
 *
 *   good      client certificate from the CA
 *   otherCa   client certificate from a second, unrelated CA (ca.pem is still the right CA)
 *   expired   client certificate from the CA, valid only on 2020-01-01 (made with `openssl ca`,
 *             because `openssl x509` on OpenSSL 3.0 cannot backdate a start date)
 *   wrongCa   the good client certificate, but ca.pem is the unrelated CA (engine not trusted)
 *
 * EC P-256 keys keep generation well under a second.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toolMissing } from './needs.js';

export interface TestPki {
  readonly dir: string;
  readonly caCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clients: { readonly good: string; readonly otherCa: string; readonly expired: string; readonly wrongCa: string };
  remove(): void;
}

/** Why the PKI cannot be made here (no openssl command), or null. */
export function pkiUnsupported(): string | null {
  return toolMissing('openssl', ['version'], 'apt-get install openssl') ?? null;
}

function openssl(cwd: string, args: string[]): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

function newKeyAndCsr(cwd: string, name: string, subject: string): void {
  openssl(cwd, ['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${name}-key.pem`, '-out', `${name}.csr`, '-subj', subject]);
}

function newCa(cwd: string, name: string, subject: string): void {
  openssl(cwd, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${name}-key.pem`, '-out', `${name}.pem`, '-days', '2', '-subj', subject]);
}

function sign(cwd: string, csr: string, ca: string, out: string, extfile: string): void {
  openssl(cwd, ['x509', '-req', '-in', csr, '-CA', `${ca}.pem`, '-CAkey', `${ca}-key.pem`, '-CAcreateserial', '-out', out, '-days', '2', '-extfile', extfile]);
}

function clientDir(root: string, name: string, ca: string, cert: string, key: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { mode: 0o700 });
  copyFileSync(join(root, ca), join(dir, 'ca.pem'));
  copyFileSync(join(root, cert), join(dir, 'cert.pem'));
  copyFileSync(join(root, key), join(dir, 'key.pem'));
  return dir;
}

export function makeTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'cap-pki-'));
  try {
    writeFileSync(join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
    writeFileSync(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
    newCa(dir, 'ca', '/CN=capybara test CA');
    newCa(dir, 'other-ca', '/CN=unrelated test CA');
    newKeyAndCsr(dir, 'server', '/CN=127.0.0.1');
    newKeyAndCsr(dir, 'client', '/CN=capybara controller');
    sign(dir, 'server.csr', 'ca', 'server.pem', 'server.ext');
    sign(dir, 'client.csr', 'ca', 'client.pem', 'client.ext');
    sign(dir, 'client.csr', 'other-ca', 'client-other.pem', 'client.ext');
    mkdirSync(join(dir, 'db'));
    writeFileSync(join(dir, 'db', 'index.txt'), '');
    writeFileSync(join(dir, 'expired.cnf'), [
      '[ca]', 'default_ca = expired', '[expired]', 'database = db/index.txt', 'new_certs_dir = db',
      'serial = db/serial', 'rand_serial = yes', 'default_md = sha256', 'policy = any', 'unique_subject = no',
      'x509_extensions = client_ext', '[any]', 'commonName = supplied', '[client_ext]', 'extendedKeyUsage = clientAuth', '',
    ].join('\n'));
    openssl(dir, ['ca', '-batch', '-config', 'expired.cnf', '-cert', 'ca.pem', '-keyfile', 'ca-key.pem', '-in', 'client.csr',
      '-out', 'client-expired.pem', '-notext', '-startdate', '20200101000000Z', '-enddate', '20200102000000Z']);
    return {
      dir,
      caCert: join(dir, 'ca.pem'),
      serverCert: join(dir, 'server.pem'),
      serverKey: join(dir, 'server-key.pem'),
      clients: {
        good: clientDir(dir, 'good', 'ca.pem', 'client.pem', 'client-key.pem'),
        otherCa: clientDir(dir, 'other-ca-client', 'ca.pem', 'client-other.pem', 'client-key.pem'),
        expired: clientDir(dir, 'expired', 'ca.pem', 'client-expired.pem', 'client-key.pem'),
        wrongCa: clientDir(dir, 'wrong-ca', 'other-ca.pem', 'client.pem', 'client-key.pem'),
      },
      remove: () => rmSync(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
