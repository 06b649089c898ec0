/**
 * The leaf certificates the egress shows a client when it terminates TLS to an inspected host:
 * one per exact host name, signed by the deployment CA, made on first use and kept in a capped
 * cache. Every leaf of the process shares one ECDSA P-256 key pair (made once per issuer), so a new
 * leaf costs one ECDSA signature, its DER and a secure context, and no key generation: measured
 * (test/proxy/leaf-certificates.test.ts) 4-7 ms on a busy two-core machine, half of it the
 * library's ASN.1 encoding and a third the secure context.
 *
 * A leaf names one DNS name and nothing else: its subjectAltName is the exact host (never an IP
 * address, never a wildcard: a wildcard entry gets one leaf per name a client asks for), its
 * extendedKeyUsage is serverAuth only and it is no CA (basicConstraints CA:false). A leaf that
 * leaked therefore speaks for one host for one day and signs nothing.
 */
import tls from 'node:tls';
import { webcrypto } from 'node:crypto';
import { CodedError, randomSerial, x509, type Authority } from '../../common/index.js';
import type * as X509 from '@peculiar/x509';
import { parseHostName } from '../../policy/index.js';

export interface LeafIssuer {
  /**
   * A secure context whose certificate names `host` (exact DNS name), signed by the deployment CA.
   * Cached; at most `maxLeaves` held (least recently used goes first); renewed once half its life
   * has passed. Concurrent calls for one host share one issuance. Rejects (CodedError
   * `leaf_name_invalid`) a name that is not a lower-case DNS name.
   */
  contextFor(host: string): Promise<tls.SecureContext>;
  /** The CA certificate (PEM), to tell operators and clients what to trust. */
  readonly caCertificatePem: string;
}

export interface LeafOptions {
  /** Most leaves held at once (default 1024: about 3 MiB of secure contexts). */
  readonly maxLeaves?: number;
  /** How long a leaf is valid from now (default 24 h); the CA's own end caps it. */
  readonly lifetimeMs?: number;
  /** The clock, for tests. */
  readonly now?: () => number;
}

export const DEFAULT_MAX_LEAVES = 1024;
export const DEFAULT_LEAF_LIFETIME_MS = 24 * 60 * 60 * 1000;
/** Validity before the moment of issuance, for a client whose clock runs behind the egress's. */
export const LEAF_BACKDATE_MS = 60 * 60 * 1000;
/** RFC 5280 upper bound of a commonName: a longer name goes in the subjectAltName only. */
const MAX_COMMON_NAME = 64;

/** Why `host` cannot be a leaf's name: it must be a DNS name as the policy normalises it (never an IP address). */
export function leafNameProblem(host: string): string | undefined {
  const parsed = parseHostName(host);
  if (!parsed.ok) return parsed.detail;
  return parsed.name === host ? undefined : 'not a normalised host name (lower case, no trailing dot)';
}

interface Leaf {
  readonly context: tls.SecureContext;
  /** When it is renewed: half way through its life, so a connection never gets a leaf about to end. */
  readonly renewAt: number;
}

interface LeafKeys {
  readonly publicKey: webcrypto.CryptoKey;
  readonly privateKeyPem: string;
  /** The CA's key identifier, the same in every leaf (computing it costs a hash per leaf). */
  readonly authorityKeyId: X509.AuthorityKeyIdentifierExtension;
}

export class LeafCertificates implements LeafIssuer {
  readonly caCertificatePem: string;
  private readonly authority: Authority;
  private readonly maxLeaves: number;
  private readonly lifetimeMs: number;
  private readonly now: () => number;
  /** Insertion order is recency: a hit moves its leaf to the end, eviction takes the first. */
  private readonly leaves = new Map<string, Leaf>();
  private readonly issuing = new Map<string, Promise<tls.SecureContext>>();
  private keys: Promise<LeafKeys> | undefined;
  private issued = 0;

  constructor(authority: Authority, options: LeafOptions = {}) {
    const maxLeaves = options.maxLeaves ?? DEFAULT_MAX_LEAVES;
    const lifetimeMs = options.lifetimeMs ?? DEFAULT_LEAF_LIFETIME_MS;
    if (!Number.isInteger(maxLeaves) || maxLeaves < 1) throw new RangeError(`maxLeaves must be a whole number of at least 1, not ${maxLeaves}`);
    if (!Number.isFinite(lifetimeMs) || lifetimeMs < 60_000) throw new RangeError(`lifetimeMs must be at least a minute, not ${lifetimeMs}`);
    this.authority = authority;
    this.caCertificatePem = authority.certificatePem;
    this.maxLeaves = maxLeaves;
    this.lifetimeMs = lifetimeMs;
    this.now = options.now ?? Date.now;
  }

  /** Leaves held now. */
  get size(): number {
    return this.leaves.size;
  }

  /** Leaves signed since the issuer was made (renewals included). */
  get issuedCount(): number {
    return this.issued;
  }

  contextFor(host: string): Promise<tls.SecureContext> {
    const problem = leafNameProblem(host);
    if (problem !== undefined) return Promise.reject(new CodedError('leaf_name_invalid', `no leaf certificate for ${JSON.stringify(host).slice(0, 80)}: ${problem}`));
    const held = this.leaves.get(host);
    if (held !== undefined && this.now() < held.renewAt) {
      this.leaves.delete(host);
      this.leaves.set(host, held);
      return Promise.resolve(held.context);
    }
    const pending = this.issuing.get(host);
    if (pending !== undefined) return pending;
    const issuing = this.issue(host).finally(() => this.issuing.delete(host));
    this.issuing.set(host, issuing);
    return issuing;
  }

  private async issue(host: string): Promise<tls.SecureContext> {
    const lib = x509();
    const keys = await this.leafKeys();
    const now = this.now();
    const notAfter = Math.min(now + this.lifetimeMs, this.authority.notAfter.getTime());
    if (notAfter <= now) throw new CodedError('ca_invalid', `the deployment CA "${this.authority.certificate.subject}" has expired; make a new one with \`capybara-egress ca --rotate\``);
    const certificate = await lib.X509CertificateGenerator.create({
      serialNumber: randomSerial(),
      subject: host.length <= MAX_COMMON_NAME ? [{ CN: [host] }] : [{ O: ['capybara-egress inspected host'] }],
      issuer: this.authority.certificate.subject,
      notBefore: new Date(now - LEAF_BACKDATE_MS),
      notAfter: new Date(notAfter),
      publicKey: keys.publicKey as unknown as CryptoKey,
      signingKey: this.authority.privateKey as unknown as CryptoKey,
      signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' } as EcdsaParams,
      extensions: [
        new lib.BasicConstraintsExtension(false, undefined, true),
        new lib.KeyUsagesExtension(lib.KeyUsageFlags.digitalSignature, true),
        new lib.ExtendedKeyUsageExtension([lib.ExtendedKeyUsage.serverAuth]),
        // Critical when the subject holds no name (RFC 5280 §4.2.1.6).
        new lib.SubjectAlternativeNameExtension([{ type: 'dns', value: host }], host.length > MAX_COMMON_NAME),
        keys.authorityKeyId,
      ],
    });
    const context = tls.createSecureContext({ key: keys.privateKeyPem, cert: certificate.toString('pem'), minVersion: 'TLSv1.2' });
    this.issued += 1;
    this.leaves.delete(host);
    this.leaves.set(host, { context, renewAt: now + (notAfter - now) / 2 });
    for (const oldest of this.leaves.keys()) {
      if (this.leaves.size <= this.maxLeaves) break;
      this.leaves.delete(oldest);
    }
    return context;
  }

  /** The one key pair of every leaf this issuer signs, made on first use. */
  private leafKeys(): Promise<LeafKeys> {
    this.keys ??= (async () => {
      const pair = await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']);
      const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', pair.privateKey)).toString('base64');
      const privateKeyPem = `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)?.join('\n') ?? ''}\n-----END PRIVATE KEY-----\n`;
      const authorityKeyId = await x509().AuthorityKeyIdentifierExtension.create(this.authority.certificate);
      return { publicKey: pair.publicKey, privateKeyPem, authorityKeyId };
    })();
    // A failure is not kept: the next leaf tries again.
    this.keys.catch(() => (this.keys = undefined));
    return this.keys;
  }
}
