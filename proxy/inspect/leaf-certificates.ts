/**
 * The leaf certificates the egress shows a client when it terminates TLS to an inspected host:
 * one per exact host name, signed by the deployment CA, made on first use and kept in a capped
 * cache. Every leaf of the process shares one ECDSA P-256 key pair (made once per issuer), so a new
 * leaf costs one ECDSA signature, its DER (leaf-der.ts) and a secure context, and no key
 * generation: measured in test/proxy/leaf-certificates.test.ts, which prints the number.
 *
 * A leaf names one DNS name and nothing else: its subjectAltName is the exact host (never an IP
 * address, never a wildcard: a wildcard entry gets one leaf per name a client asks for), its
 * extendedKeyUsage is serverAuth only and it is no CA (basicConstraints CA:false). A leaf that
 * leaked therefore speaks for one host for one day and signs nothing.
 */
import tls from 'node:tls';
import { createPrivateKey, sign, webcrypto, type KeyObject } from 'node:crypto';
import { CodedError, randomSerial, x509, type Authority } from '../../common/index.js';
import { parseHostName } from '../../policy/index.js';
import type { LeafIssuer } from '../admission/index.js';
import { leafCertificatePem, leafTbs, type LeafTemplate } from './leaf-der.js';

export interface LeafOptions {
  /**
   * Most leaves held at once (default 256). A leaf's secure context holds about 30 KiB of
   * OpenSSL's memory (measured: 2,048 leaves, RSS before and after), so the cap is about 7.5 MiB;
   * a name evicted costs a new leaf (a millisecond or two) when it is asked for again.
   */
  readonly maxLeaves?: number;
  /** How long a leaf is valid from now (default 24 h); the CA's own end caps it. */
  readonly lifetimeMs?: number;
  /** The clock, for tests. */
  readonly now?: () => number;
}

export const DEFAULT_MAX_LEAVES = 256;
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
  readonly privateKeyPem: string;
  /** The CA's key, to sign with. */
  readonly caKey: KeyObject;
  /** What every leaf shares, encoded once. */
  readonly template: LeafTemplate;
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
    const keys = await this.leafKeys();
    const now = this.now();
    const notAfter = Math.min(now + this.lifetimeMs, this.authority.notAfter.getTime());
    if (notAfter <= now) throw new CodedError('ca_invalid', `the deployment CA "${this.authority.certificate.subject}" has expired; make a new one with \`capybara-egress ca --rotate\``);
    const tbs = leafTbs(keys.template, {
      serial: Buffer.from(randomSerial(), 'hex'),
      notBefore: new Date(now - LEAF_BACKDATE_MS),
      notAfter: new Date(notAfter),
      host,
      commonName: host.length <= MAX_COMMON_NAME,
    });
    const certificate = leafCertificatePem(tbs, sign('sha256', tbs, keys.caKey));
    const context = tls.createSecureContext({ key: keys.privateKeyPem, cert: certificate, minVersion: 'TLSv1.2' });
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
      const lib = x509();
      const spki = Buffer.from(await webcrypto.subtle.exportKey('spki', pair.publicKey));
      const extensions = [
        new lib.BasicConstraintsExtension(false, undefined, true),
        new lib.KeyUsagesExtension(lib.KeyUsageFlags.digitalSignature, true),
        new lib.ExtendedKeyUsageExtension([lib.ExtendedKeyUsage.serverAuth]),
        await lib.AuthorityKeyIdentifierExtension.create(this.authority.certificate),
      ].map((e) => Buffer.from(e.rawData));
      const template = { issuer: Buffer.from(this.authority.certificate.subjectName.toArrayBuffer()), spki, extensions };
      return { privateKeyPem, caKey: createPrivateKey(this.authority.keyPem), template };
    })();
    // A failure is not kept: the next leaf tries again.
    this.keys.catch(() => (this.keys = undefined));
    return this.keys;
  }
}
