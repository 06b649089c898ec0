/**
 * A throwaway self-signed certificate for TLS upstreams in tests, made with the openssl command
 * (EC P-256: well under a second). The proxy never looks inside TLS, so the clients in these
 * tests skip verification; the names are there for servers that pick a certificate by name.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toolMissing } from './needs.js';

export interface TestCert {
  readonly key: string;
  readonly cert: string;
}

/** Why no certificate can be made here, or undefined when one can. */
export function opensslUnavailable(): string | undefined {
  return toolMissing('openssl', ['version'], 'apt-get install openssl');
}

export function selfSignedCert(names: readonly string[] = ['localhost']): TestCert {
  const dir = mkdtempSync(join(tmpdir(), 'egress-cert-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '2', '-subj', '/CN=egress-test',
      '-addext', `subjectAltName=${names.map((n) => `DNS:${n}`).join(',')}`,
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
