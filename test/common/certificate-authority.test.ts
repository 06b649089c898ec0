/**
 * The deployment CA: what it is (a P-256 CA that may sign leaves and nothing below them), that a
 * leaf it signs passes a real node:tls verification for its name and fails for another name or
 * against another CA, and that every malformed or mismatched certificate/key is refused with a
 * sentence that never quotes the key.
 */
import t, { type Test } from 'tap';
import { X509Certificate, generateKeyPairSync, webcrypto } from 'node:crypto';
import {
  createAuthority,
  decodeInline,
  encodeInline,
  parseAuthority,
  randomSerial,
  x509,
  type Authority,
} from '../../common/certificate-authority.js';
import { isCodedError } from '../../common/index.js';
import { handshake } from '../support/tls-handshake.js';

/** A leaf for `host` signed by the authority, made here so that this test needs only the CA module. */
async function leaf(authority: Authority, host: string): Promise<{ key: string; cert: string }> {
  const lib = x509();
  const keys = await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']);
  const cert = await lib.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: [{ CN: [host] }],
    issuer: authority.certificate.subject,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 3_600_000),
    publicKey: keys.publicKey as unknown as CryptoKey,
    signingKey: authority.privateKey as unknown as CryptoKey,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' } as EcdsaParams,
    extensions: [new lib.SubjectAlternativeNameExtension([{ type: 'dns', value: host }])],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  return { cert: cert.toString('pem'), key: `-----BEGIN PRIVATE KEY-----\n${pkcs8}\n-----END PRIVATE KEY-----\n` };
}

async function refusal(t: Test, promise: Promise<unknown>, pattern: RegExp, secret?: string): Promise<void> {
  try {
    await promise;
    t.fail('accepted');
  } catch (err) {
    t.ok(isCodedError(err, 'CodedError'), 'a CodedError');
    t.equal((err as { code: string }).code, 'ca_invalid');
    t.match((err as Error).message, pattern);
    if (secret !== undefined) t.notOk((err as Error).message.includes(secret), 'the message does not quote the key');
  }
}

let ca: Authority;
let other: Authority;
t.before(async () => {
  ca = await createAuthority({ commonName: 'test deployment CA' });
  other = await createAuthority();
});

t.test('the CA is a P-256 CA that signs leaves and no sub-CA, valid ten years from a little before now', async (t) => {
  const node = new X509Certificate(ca.certificatePem);
  t.ok(node.ca, 'basicConstraints CA:true');
  t.ok(node.verify(node.publicKey), 'self-signed');
  t.equal(node.publicKey.asymmetricKeyType, 'ec');
  t.equal(node.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1');
  t.match(node.subject, /CN=test deployment CA/);
  const lib = x509();
  const constraints = ca.certificate.getExtension(lib.BasicConstraintsExtension);
  t.equal(constraints?.pathLength, 0, 'pathLen 0');
  t.equal(constraints?.critical, true);
  const usage = ca.certificate.getExtension(lib.KeyUsagesExtension);
  t.equal(usage?.usages, lib.KeyUsageFlags.keyCertSign | lib.KeyUsageFlags.cRLSign, 'keyCertSign and cRLSign only');
  t.equal(usage?.critical, true);
  t.equal((ca.certificate.signatureAlgorithm as { hash?: { name?: string } }).hash?.name, 'SHA-256');
  const now = Date.now();
  t.ok(ca.certificate.notBefore.getTime() < now - 30 * 60_000, 'backdated for slow clocks');
  const years = (ca.notAfter.getTime() - now) / (365.25 * 24 * 3_600_000);
  t.ok(years > 9.9 && years < 10.1, `ten years (${years.toFixed(2)})`);
  t.match(ca.fingerprint, /^sha256:[0-9a-f]{64}$/);
  t.match(ca.keyPem, /^-----BEGIN PRIVATE KEY-----\n/);
  t.notOk(ca.certificatePem.includes('PRIVATE'), 'the certificate text holds no key');
  t.not((await createAuthority()).certificate.subject, other.certificate.subject, 'two CAs differ by name');
});

t.test('a leaf the CA signs passes node:tls verification for its name only, and only against this CA', async (t) => {
  const identity = await leaf(ca, 'inspected.test');
  const ok = await handshake(identity, { ca: ca.certificatePem, servername: 'inspected.test' });
  t.equal(ok.error, undefined, 'trusted');
  t.equal(ok.peer?.subject?.CN, 'inspected.test');
  const wrongName = await handshake(identity, { ca: ca.certificatePem, servername: 'other.test' });
  t.equal(wrongName.error, 'ERR_TLS_CERT_ALTNAME_INVALID', 'another name is refused');
  const wrongCa = await handshake(identity, { ca: other.certificatePem, servername: 'inspected.test' });
  t.equal(wrongCa.error, 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'another CA does not vouch for it');
});

t.test('parsing the PEMs back gives the same CA, and its key still signs', async (t) => {
  const again = await parseAuthority(ca.certificatePem, ca.keyPem);
  t.equal(again.fingerprint, ca.fingerprint);
  t.equal(again.certificatePem, ca.certificatePem);
  t.equal(again.keyPem, ca.keyPem);
  const identity = await leaf(again, 'again.test');
  t.equal((await handshake(identity, { ca: ca.certificatePem, servername: 'again.test' })).error, undefined);
});

t.test('the inline form round-trips, with or without line breaks', async (t) => {
  const inline = encodeInline(ca);
  t.match(inline, /^[A-Za-z0-9+/]+=*$/);
  t.equal((await decodeInline(inline)).fingerprint, ca.fingerprint);
  const wrapped = `${inline.match(/.{1,76}/g)?.join('\n')}\n`;
  const back = await decodeInline(wrapped);
  t.equal(back.fingerprint, ca.fingerprint);
  t.equal((await handshake(await leaf(back, 'inline.test'), { ca: ca.certificatePem, servername: 'inline.test' })).error, undefined);
});

t.test('a key that is not the certificate\'s is refused, naming the certificate and what to do', async (t) => {
  const keyBody = other.keyPem.split('\n')[1] ?? '';
  await refusal(t, parseAuthority(ca.certificatePem, other.keyPem), /does not belong to the CA certificate "CN=test deployment CA.*--rotate/, keyBody);
  await refusal(t, decodeInline(Buffer.from(ca.certificatePem + other.keyPem).toString('base64')), /does not belong/, keyBody);
});

t.test('garbage, non-CAs, expired CAs, other key types and wrong block counts are refused', async (t) => {
  const identity = await leaf(ca, 'leaf.test');
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const rsaKeys = { privateKey: await webcrypto.subtle.importKey('pkcs8', rsa.privateKey.export({ type: 'pkcs8', format: 'der' }), { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, true, ['sign']), publicKey: await webcrypto.subtle.importKey('spki', rsa.publicKey.export({ type: 'spki', format: 'der' }), { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, true, ['verify']) };
  const lib = x509();
  const rsaCa = await lib.X509CertificateGenerator.createSelfSigned({ name: 'CN=rsa', keys: rsaKeys as unknown as CryptoKeyPair, signingAlgorithm: { name: 'RSASSA-PKCS1-v1_5' }, extensions: [new lib.BasicConstraintsExtension(true, 0, true)] });
  const rsaKeyPem = rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  const old = await createAuthority({ now: new Date('2010-01-01T00:00:00Z') });
  const encrypted = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'x' }) as string;
  const cases: Array<[string, () => Promise<unknown>, RegExp]> = [
    ['empty certificate', () => parseAuthority('', ca.keyPem), /exactly one PEM "CERTIFICATE" block; found 0/],
    ['two certificates', () => parseAuthority(ca.certificatePem + other.certificatePem, ca.keyPem), /found 2/],
    ['a certificate block of garbage', () => parseAuthority('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n', ca.keyPem), /not a readable X.509/],
    ['a leaf, not a CA', () => parseAuthority(identity.cert, identity.key), /is not a CA/],
    ['an RSA CA', () => parseAuthority(rsaCa.toString('pem'), rsaKeyPem), /must be ECDSA P-256; "CN=rsa" has a rsa key of 2048 bits/],
    ['an expired CA', () => parseAuthority(old.certificatePem, old.keyPem), /valid from 2009.* to 2020.*not now.*--rotate/],
    ['no key', () => parseAuthority(ca.certificatePem, ''), /exactly one PEM "PRIVATE KEY".*found 0/],
    ['two keys', () => parseAuthority(ca.certificatePem, ca.keyPem + other.keyPem), /found 2/],
    ['a key block of garbage', () => parseAuthority(ca.certificatePem, '-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n'), /not a readable private key/],
    ['an encrypted key', () => parseAuthority(ca.certificatePem, encrypted), /exactly one PEM "PRIVATE KEY"|not a readable private key/],
    ['inline: empty', () => decodeInline(''), /not base64/],
    ['inline: not base64', () => decodeInline('not base64!'), /not base64/],
    ['inline: PEM text, not its base64', () => decodeInline(ca.certificatePem + ca.keyPem), /not base64/],
    ['inline: base64 of text', () => decodeInline(Buffer.from('hello').toString('base64')), /holds 0 and 0/],
    ['inline: certificate only', () => decodeInline(Buffer.from(ca.certificatePem).toString('base64')), /holds 1 and 0/],
    ['inline: two certificates', () => decodeInline(Buffer.from(ca.certificatePem + other.certificatePem + ca.keyPem).toString('base64')), /holds 2 and 1/],
  ];
  for (const [name, run, pattern] of cases) await t.test(name, (t) => refusal(t, run(), pattern, ca.keyPem.split('\n')[1]));
});
