/**
 * A leaf certificate's DER, written directly (RFC 5280 §4.1): every part that is the same for all
 * of an issuer's leaves (the issuer's name, the leaf key, the fixed extensions) is encoded once, by
 * @peculiar/x509, and only the serial, the validity, the name and its subjectAltName are written
 * per leaf. The library's generic encoder took most of a new leaf's cost (3-4 ms of 5-7); this
 * takes microseconds. What comes out is checked by OpenSSL in every handshake test
 * (test/proxy/leaf-certificates.test.ts) and by node:crypto's X509Certificate.
 */

/** One DER TLV with a definite length (X.690 §8.1.3). */
function tlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  const head = n < 0x80 ? [tag, n] : n < 0x100 ? [tag, 0x81, n] : n < 0x10000 ? [tag, 0x82, n >> 8, n & 0xff] : [tag, 0x83, n >> 16, (n >> 8) & 0xff, n & 0xff];
  return Buffer.concat([Buffer.from(head), content]);
}

const seq = (...parts: Buffer[]): Buffer => tlv(0x30, Buffer.concat(parts));
/** ecdsa-with-SHA256 (RFC 5758 §3.2: no parameters). */
const ECDSA_SHA256 = seq(Buffer.from('06082a8648ce3d040302', 'hex'));
const VERSION_3 = tlv(0xa0, tlv(0x02, Buffer.from([2])));
const OID_COMMON_NAME = Buffer.from('0603550403', 'hex');
const OID_SUBJECT_ALT_NAME = Buffer.from('0603551d11', 'hex');
const CRITICAL = Buffer.from('0101ff', 'hex');

/** UTCTime up to 2049, GeneralizedTime from 2050 (RFC 5280 §4.1.2.5), to the second, in UTC. */
function time(date: Date): Buffer {
  const iso = date.toISOString();
  const digits = iso.slice(0, 19).replace(/[-T:]/g, '');
  const year = date.getUTCFullYear();
  return year < 2050 ? tlv(0x17, Buffer.from(`${digits.slice(2)}Z`, 'ascii')) : tlv(0x18, Buffer.from(`${digits}Z`, 'ascii'));
}

/** What every leaf of one issuer shares, each already DER. */
export interface LeafTemplate {
  /** The CA's subject Name: the leaves' issuer. */
  readonly issuer: Buffer;
  /** The leaf key's SubjectPublicKeyInfo. */
  readonly spki: Buffer;
  /** Whole Extension structures, the same in every leaf. */
  readonly extensions: readonly Buffer[];
}

export interface LeafFields {
  /** A positive serial, its first byte below 0x80. */
  readonly serial: Buffer;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** An exact, normalised DNS name (leaf-certificates.ts checks it: ASCII letters, digits, "-", "_", "."). */
  readonly host: string;
  /** Whether the name also goes in the subject's commonName (at most 64 characters). */
  readonly commonName: boolean;
}

/** The TBSCertificate to sign. */
export function leafTbs(template: LeafTemplate, fields: LeafFields): Buffer {
  const name = Buffer.from(fields.host, 'ascii');
  // An empty subject makes the subjectAltName critical (RFC 5280 §4.2.1.6).
  const subject = fields.commonName ? seq(tlv(0x31, seq(OID_COMMON_NAME, tlv(0x0c, name)))) : seq();
  const altName = seq(OID_SUBJECT_ALT_NAME, ...(fields.commonName ? [] : [CRITICAL]), tlv(0x04, seq(tlv(0x82, name))));
  return seq(
    VERSION_3,
    tlv(0x02, fields.serial),
    ECDSA_SHA256,
    template.issuer,
    seq(time(fields.notBefore), time(fields.notAfter)),
    subject,
    template.spki,
    tlv(0xa3, seq(...template.extensions, altName)),
  );
}

/** The certificate: the TBSCertificate, its algorithm and its DER ECDSA signature. */
export function leafCertificatePem(tbs: Buffer, signature: Buffer): string {
  const der = seq(tbs, ECDSA_SHA256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  return `-----BEGIN CERTIFICATE-----\n${der.toString('base64').match(/.{1,64}/g)?.join('\n') ?? ''}\n-----END CERTIFICATE-----\n`;
}
