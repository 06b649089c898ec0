/**
 * What the proxy needs to inspect: the leaf issuer of the deployment CA, and the certificates the
 * upstreams of inspected hosts are verified against. Loaded only when the policy has inspected
 * entries (a proxy that inspects nothing never reads, makes or needs a CA directory), at start and
 * on every reload, so that a rotated CA is taken on SIGHUP. An unchanged CA keeps its issuer (and
 * the leaves in its cache).
 */
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { CodedError, readRegularFile, RegularFileError } from '../../common/index.js';
import { loadAuthority, type CaSource } from './ca-store.js';
import type { Inspection } from '../admission/index.js';
import { LeafCertificates } from './leaf-certificates.js';

/** What createEgressProxy takes (and EgressProxy.setInspection) to inspect, as loaded: with the CA's fingerprint, for the log. */
export interface LoadedInspection extends Inspection {
  readonly fingerprint: string;
}

/** Where the upstream trust comes from: a file given, else the system bundle when readable, else Node's roots. */
export interface UpstreamCaSource {
  readonly path: string | undefined;
  readonly from: string;
}

export const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/**
 * The most an upstream CA bundle may hold: the system's is about 220 KiB (some 150 roots), and a
 * bundle the size of several system ones is not a CA bundle. Read bounded (readRegularFile), so a
 * device or a FIFO given by mistake is refused at once rather than hanging the start or a reload.
 */
export const MAX_UPSTREAM_CA_BYTES = 4 * 1024 * 1024;

const readBundle = (path: string): string => readRegularFile(path, { maxBytes: MAX_UPSTREAM_CA_BYTES }).toString('utf8');

/** The certificates of a PEM bundle, each checked to parse; a file with none is refused. */
export function readUpstreamCa(source: UpstreamCaSource, readFile: (path: string) => string = readBundle): readonly string[] {
  let text: string;
  if (source.path === undefined) {
    try {
      text = readFile(SYSTEM_CA_BUNDLE);
    } catch {
      return tls.rootCertificates;
    }
  } else {
    try {
      text = readFile(source.path);
    } catch (err) {
      const why = err instanceof RegularFileError ? err.message : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
      throw new CodedError('upstream_ca_invalid', `${source.from}: cannot read ${source.path} (${why}); give a PEM bundle of the CA certificates upstreams are verified against`);
    }
  }
  const where = source.path ?? SYSTEM_CA_BUNDLE;
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new CodedError('upstream_ca_invalid', `${source.from}: ${where} holds no PEM certificate; give a bundle of the CA certificates upstreams are verified against`);
  blocks.forEach((block, i) => {
    try {
      new X509Certificate(block);
    } catch {
      throw new CodedError('upstream_ca_invalid', `${source.from}: certificate ${i + 1} of ${blocks.length} in ${where} cannot be read`);
    }
  });
  return Object.freeze(blocks.map((b) => `${b}\n`));
}

/**
 * The inspection for a policy with `inspected` entries, or undefined when it has none. `previous`
 * is kept when the CA is the same. Throws a CodedError that names the source and what to do.
 */
export async function loadInspection(inspected: readonly string[], ca: CaSource, upstream: UpstreamCaSource, previous?: LoadedInspection): Promise<LoadedInspection | undefined> {
  if (inspected.length === 0) return undefined;
  const upstreamCa = readUpstreamCa(upstream);
  let authority;
  try {
    ({ authority } = await loadAuthority(ca));
  } catch (err) {
    throw new CodedError('ca_unavailable', `the policy inspects ${inspected.join(', ')}, which needs the deployment CA, and ${(err as Error).message}`, { cause: err });
  }
  const leaves = previous !== undefined && previous.fingerprint === authority.fingerprint ? previous.leaves : new LeafCertificates(authority);
  return Object.freeze({ leaves, upstreamCa, fingerprint: authority.fingerprint });
}
