import * as x509 from '@peculiar/x509';
import { webcrypto } from 'node:crypto';
import tls from 'node:tls';
x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
/** TEMPORARY until the CA module lands. */
export async function testLeafIssuer() {
  const caKeys = await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify']);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({ serialNumber: '01', name: 'CN=scratch CA', notBefore: new Date(Date.now() - 3600e3), notAfter: new Date(Date.now() + 86400e3), keys: caKeys as CryptoKeyPair, signingAlgorithm: alg, extensions: [new x509.BasicConstraintsExtension(true, 0, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)] });
  const leafKeys = await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify']);
  const pk = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', leafKeys.privateKey)).toString('base64');
  const key = `-----BEGIN PRIVATE KEY-----\n${pk}\n-----END PRIVATE KEY-----\n`;
  let n = 2;
  return {
    caCertificatePem: ca.toString('pem'),
    async contextFor(host: string) {
      const leaf = await x509.X509CertificateGenerator.create({ serialNumber: (n++).toString(16).padStart(2, '0'), subject: `CN=${host}`, issuer: ca.subject, notBefore: new Date(Date.now() - 3600e3), notAfter: new Date(Date.now() + 86400e3), signingKey: (caKeys as CryptoKeyPair).privateKey, publicKey: leafKeys.publicKey, signingAlgorithm: alg, extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: host }]), new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth])] });
      return tls.createSecureContext({ cert: leaf.toString('pem'), key });
    },
  };
}
