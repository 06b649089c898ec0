/**
 * A request body on its way upstream, watched for placeholders: a placeholder in a body is never
 * swapped (the proxy does not rewrite bodies) and never passed, since a body is where code in the
 * sandbox would post it to a host that keeps what it is sent (a gist, an issue). The chunk in
 * which a placeholder completes is not passed on; the scanner fails instead, and the exchange
 * aborts the upstream request, so the upstream sees a cut body, never a complete one.
 *
 * Bounded memory: across chunk boundaries it keeps only the last (longest placeholder - 1) bytes.
 * It sees the raw bytes only: a placeholder encoded in the body (base64, escapes) passes.
 */
import { Transform, type TransformCallback } from 'node:stream';
import { CodedError } from '../../common/index.js';
import { secretLabel, type LoadedSecret, type SecretSet } from '../../policy/index.js';

/** A placeholder passed in a body; `secrets` names them by fingerprint (`NAME sha256:...`). */
export class PlaceholderInBody extends CodedError<'secret_wrong_host'> {
  readonly secrets: readonly string[];

  constructor(secret: LoadedSecret) {
    // The message goes to the workload: the name alone, never the fingerprint (policy/secrets.ts, refusal).
    super('secret_wrong_host', `the placeholder of secret ${secret.name} is in the request body; a placeholder goes only in headers`);
    this.secrets = [secretLabel(secret)];
  }
}

export class PlaceholderScanner extends Transform {
  private readonly needles: readonly { readonly secret: LoadedSecret; readonly bytes: Buffer }[];
  private readonly keep: number;
  private tail: Buffer = Buffer.alloc(0);

  constructor(set: SecretSet) {
    super();
    this.needles = set.placeholders.map((secret) => ({ secret, bytes: Buffer.from(secret.placeholder!, 'latin1') }));
    this.keep = Math.max(0, set.longestPlaceholder - 1);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    // The seam: the kept tail and as much of the chunk as a placeholder started in the tail could reach.
    const seam = this.tail.length === 0 ? undefined : Buffer.concat([this.tail, chunk.subarray(0, this.keep)]);
    for (const { secret, bytes } of this.needles) {
      if (chunk.includes(bytes) || (seam !== undefined && seam.includes(bytes))) {
        done(new PlaceholderInBody(secret));
        return;
      }
    }
    const window = chunk.length >= this.keep ? chunk : Buffer.concat([this.tail, chunk]);
    // A copy: a slice would hold the whole chunk's memory for as long as the request lasts.
    this.tail = Buffer.from(window.subarray(Math.max(0, window.length - this.keep)));
    done(null, chunk);
  }
}

/**
 * The body stream to send upstream: scanned when the policy has placeholders, else the request
 * itself. The scanner's failure reaches the exchange through the pool's client (undici, or the
 * inspected path's own), which listens only while it sends the body: a request that failed before
 * (no connection, a bad upstream certificate) leaves the client's bytes still flowing into the
 * scanner, and an 'error' nobody hears would end the process for every client. So one listener stays for the scanner's whole life; what it hears
 * then belongs to an exchange that has ended already.
 */
export function scannedBody<S extends NodeJS.ReadableStream>(body: S, set: SecretSet | undefined): S | PlaceholderScanner {
  if (set === undefined || set.placeholders.length === 0) return body;
  const scanner = new PlaceholderScanner(set);
  scanner.on('error', () => undefined);
  return body.pipe(scanner);
}
