/** The leaves of a fresh deployment CA, as the proxy makes them, for inspected connections in tests. */
import { createAuthority } from '../../common/index.js';
import { LeafCertificates } from '../../proxy/inspect/index.js';

export async function testLeafIssuer(): Promise<LeafCertificates> {
  return new LeafCertificates(await createAuthority());
}
