/**
 * The deployment CA: the one certificate a sandbox trusts so that the egress can terminate TLS to
 * an inspected host. Made here, with @peculiar/x509 over Node's WebCrypto (ECDSA P-256, SHA-256),
 * never by shelling out to openssl. The egress holds the key; the controller holds it too (it
 * makes the CA and hands it to each egress it starts) and puts only the certificate into sandboxes.
 *
 * Choices, and why:
 * - ten years of validity: a CA that expires silently breaks every inspected host at once, and
 *   the key is replaced on purpose (`capybara-egress ca --rotate`) rather than by a calendar;
 *   the leaves it signs live a day.
 * - basicConstraints CA:true with pathLen 0 (critical): the key signs leaves and no sub-CA, so a
 *   leaf that leaked cannot be used to mint further certificates.
 * - keyUsage keyCertSign|cRLSign only (critical): the CA key never serves TLS itself.
 * - a random suffix in the common name: after a rotation, the old and the new CA differ by name
 *   as well as by key, so an operator reading a trust store can tell them apart.
 *
 * The library is loaded on first use (with require: see common/require-cjs.ts), so a proxy that
 * inspects nothing never pays for it.
 */
import { createPrivateKey, createPublicKey, randomBytes, webcrypto, X509Certificate as NodeCertificate } from 'node:crypto';
import type * as X509 from '@peculiar/x509';
import { CodedError } from './coded-error.js';
import { requireCjs } from './require-cjs.js';

export interface Authority {
  /** The CA certificate, one PEM block: what sandboxes trust. */
  readonly certificatePem: string;
  /** The CA private key, one PKCS#8 PEM block: what only the egress (and the controller) may read. */
  readonly keyPem: string;
  /** The CA certificate, parsed. */
  readonly certificate: X509.X509Certificate;
  /** The CA private key as a WebCrypto key (ECDSA P-256), to sign leaves with. */
  readonly privateKey: webcrypto.CryptoKey;
  /** `sha256:` and the hex SHA-256 of the certificate's DER: names this CA in logs and output. */
  readonly fingerprint: string;
  /** The end of the CA's validity: no leaf outlives it. */
  readonly notAfter: Date;
}

/** The code of every error about a CA's certificate or key. */
export type AuthorityErrorCode = 'ca_invalid';

export const CA_VALIDITY_YEARS = 10;
/** A little validity before the moment of creation, for clients whose clock runs behind. */
export const CA_BACKDATE_MS = 60 * 60 * 1000;
const EC_KEY: webcrypto.EcKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' };
const SIGNING: webcrypto.EcdsaParams = { name: 'ECDSA', hash: 'SHA-256' };

let library: typeof X509 | undefined;

/** @peculiar/x509, loaded once and bound to Node's WebCrypto. */
export function x509(): typeof X509 {
  if (library === undefined) {
    const loaded = requireCjs('@peculiar/x509') as typeof X509;
    loaded.cryptoProvider.set(webcrypto as unknown as Crypto);
    library = loaded;
  }
  return library;
}

/** A positive random serial of 128 bits (RFC 5280 §4.1.2.2: at most 20 octets, positive, unique). */
export function randomSerial(): string {
  const bytes = randomBytes(16);
  bytes[0] = ((bytes[0] ?? 0) & 0x7f) | 0x01;
  return bytes.toString('hex');
}

export async function createAuthority(options: { commonName?: string; now?: Date } = {}): Promise<Authority> {
  const lib = x509();
  const now = options.now ?? new Date();
  const commonName = options.commonName ?? `capybara-egress deployment CA ${randomBytes(4).toString('hex')}`;
  const keys = await webcrypto.subtle.generateKey(EC_KEY, true, ['sign', 'verify']);
  const notAfter = new Date(now);
  notAfter.setUTCFullYear(notAfter.getUTCFullYear() + CA_VALIDITY_YEARS);
  const certificate = await lib.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: [{ CN: [commonName] }, { O: ['capybara-egress'] }],
    notBefore: new Date(now.getTime() - CA_BACKDATE_MS),
    notAfter,
    signingAlgorithm: SIGNING,
    keys: keys as unknown as CryptoKeyPair,
    extensions: [
      new lib.BasicConstraintsExtension(true, 0, true),
      new lib.KeyUsagesExtension(lib.KeyUsageFlags.keyCertSign | lib.KeyUsageFlags.cRLSign, true),
      await lib.SubjectKeyIdentifierExtension.create(keys.publicKey as unknown as CryptoKey),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  const keyPem = pemBlock('PRIVATE KEY', pkcs8);
  return parseAuthority(certificate.toString('pem'), keyPem, now);
}

/**
 * The CA from its two PEM texts, checked: exactly one certificate, which is a CA (basicConstraints
 * CA:true, keyUsage keyCertSign) with an ECDSA P-256 key, valid at `now`, and a private key that
 * is the certificate's. Anything else throws a CodedError that says what is wrong and what to do;
 * no message ever quotes the key.
 */
export async function parseAuthority(certificatePem: string, keyPem: string, now: Date = new Date()): Promise<Authority> {
  const lib = x509();
  const certBlocks = pemBlocks(certificatePem, 'CERTIFICATE');
  if (certBlocks !== 1) {
    throw invalid(`the CA certificate must be exactly one PEM "CERTIFICATE" block; found ${certBlocks}`);
  }
  let node: NodeCertificate;
  let certificate: X509.X509Certificate;
  try {
    node = new NodeCertificate(certificatePem);
    certificate = new lib.X509Certificate(certificatePem);
  } catch (cause) {
    throw invalid('the CA certificate is not a readable X.509 certificate', cause);
  }
  const constraints = certificate.getExtension(lib.BasicConstraintsExtension);
  if (constraints?.ca !== true || !node.ca) {
    throw invalid(`the certificate "${certificate.subject}" is not a CA (its basicConstraints lack CA:true); make a CA with \`capybara-egress ca --rotate\``);
  }
  const usage = certificate.getExtension(lib.KeyUsagesExtension);
  if (usage !== null && (usage.usages & lib.KeyUsageFlags.keyCertSign) === 0) {
    throw invalid(`the CA certificate "${certificate.subject}" may not sign certificates (its keyUsage lacks keyCertSign)`);
  }
  const publicKey = node.publicKey;
  if (publicKey.asymmetricKeyType !== 'ec' || publicKey.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw invalid(`the CA key must be ECDSA P-256; "${certificate.subject}" has ${describeKey(publicKey)}`);
  }
  if (now.getTime() < certificate.notBefore.getTime() || now.getTime() > certificate.notAfter.getTime()) {
    throw invalid(`the CA certificate "${certificate.subject}" is valid from ${certificate.notBefore.toISOString()} to ${certificate.notAfter.toISOString()}, not now; make a new one with \`capybara-egress ca --rotate\``);
  }
  const keyBlocks = pemBlocks(keyPem, 'PRIVATE KEY') + pemBlocks(keyPem, 'EC PRIVATE KEY');
  if (keyBlocks !== 1) {
    throw invalid(`the CA key must be exactly one PEM "PRIVATE KEY" (PKCS#8) or "EC PRIVATE KEY" block; found ${keyBlocks}`);
  }
  let pkcs8: Buffer;
  try {
    const key = createPrivateKey(keyPem);
    const derived = createPublicKey(key).export({ type: 'spki', format: 'der' });
    if (!derived.equals(publicKey.export({ type: 'spki', format: 'der' }))) {
      throw invalid(`the CA key does not belong to the CA certificate "${certificate.subject}": keep the ca.crt and ca.key that were made together, or make a new pair with \`capybara-egress ca --rotate\``);
    }
    pkcs8 = key.export({ type: 'pkcs8', format: 'der' });
  } catch (cause) {
    if (cause instanceof CodedError) throw cause;
    throw invalid('the CA key is not a readable private key (an encrypted key is not supported)');
  }
  const privateKey = await webcrypto.subtle.importKey('pkcs8', pkcs8, EC_KEY, false, ['sign']);
  return Object.freeze({
    certificatePem: certificate.toString('pem') + '\n',
    keyPem: pemBlock('PRIVATE KEY', pkcs8),
    certificate,
    privateKey,
    fingerprint: `sha256:${node.fingerprint256.replace(/:/g, '').toLowerCase()}`,
    notAfter: certificate.notAfter,
  });
}

/** The EGRESS_CA_INLINE value: base64 of the certificate PEM followed by the key PEM. */
export function encodeInline(authority: Authority): string {
  return Buffer.from(authority.certificatePem + authority.keyPem, 'utf8').toString('base64');
}

/** The CA from an EGRESS_CA_INLINE value (whitespace and line breaks in the base64 are ignored). */
export async function decodeInline(value: string): Promise<Authority> {
  const compact = value.replace(/\s+/g, '');
  if (compact === '' || !/^[A-Za-z0-9+/]+={0,2}$/.test(compact) || compact.length % 4 !== 0) {
    throw invalid('the inline CA is not base64 text; make it with `capybara-egress ca --inline`');
  }
  const text = Buffer.from(compact, 'base64').toString('utf8');
  const certificates = [...text.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g)].map((m) => m[0]);
  const keys = [...text.matchAll(/-----BEGIN (EC )?PRIVATE KEY-----[\s\S]*?-----END (EC )?PRIVATE KEY-----/g)].map((m) => m[0]);
  if (certificates.length !== 1 || keys.length !== 1) {
    throw invalid(`the inline CA must hold one certificate and one private key in PEM; it holds ${certificates.length} and ${keys.length}; make it with \`capybara-egress ca --inline\``);
  }
  return parseAuthority(`${certificates[0]}\n`, `${keys[0]}\n`);
}

/** How many PEM blocks of exactly this label the text holds (a block of any other label is ignored). */
function pemBlocks(text: string, label: string): number {
  return text.match(new RegExp(`^-----BEGIN ${label}-----$`, 'gm'))?.length ?? 0;
}

function pemBlock(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

function describeKey(key: ReturnType<typeof createPublicKey>): string {
  const curve = key.asymmetricKeyDetails?.namedCurve;
  const bits = key.asymmetricKeyDetails?.modulusLength;
  return `a ${key.asymmetricKeyType ?? 'unknown'} key${curve ? ` on ${curve}` : ''}${bits ? ` of ${bits} bits` : ''}`;
}

function invalid(message: string, cause?: unknown): CodedError<AuthorityErrorCode> {
  return new CodedError('ca_invalid', message, cause === undefined ? undefined : { cause });
}
