/**
 * A response from a bound host, watched for the secrets the proxy put into its request: a host
 * that reflects what it is sent (CORS echoing the Origin, an API echoing a request id, an error
 * page quoting a header) would otherwise hand the real value to the sandbox, which put its
 * placeholder in any header it liked. The head is refused whole when a field or the reason phrase
 * holds a value; the body is passed on with the last (longest value - 1) bytes held back, so that
 * no piece of a value straddling two reads reaches the client before the value is found whole, and
 * on a value the response is cut there.
 *
 * It sees the raw bytes only: a value the host encodes (base64, escapes, compressed) passes.
 */
import { CodedError } from '../../common/index.js';
import { secretLabel, type LoadedSecret } from '../../policy/index.js';

/** A response that holds a secret the proxy put into its request; `secrets` names it by fingerprint. */
export class SecretReflected extends CodedError<'bad_upstream_response'> {
  readonly secrets: readonly string[];

  constructor(secret: LoadedSecret, where: string) {
    super('bad_upstream_response', `the response ${where} holds the value of secret ${secretLabel(secret)}, which the proxy put into the request: a host that reflects what it is sent would hand it to the workload`);
    this.secrets = [secretLabel(secret)];
  }
}

export class ValueWatch {
  private readonly needles: readonly { readonly secret: LoadedSecret; readonly bytes: Buffer }[];
  private readonly keep: number;
  private tail: Buffer = Buffer.alloc(0);

  constructor(secrets: readonly LoadedSecret[]) {
    this.needles = secrets.map((secret) => ({ secret, bytes: Buffer.from(secret.value, 'latin1') }));
    this.keep = Math.max(0, ...this.needles.map((n) => n.bytes.length - 1));
  }

  /** Whether a response head (its reason phrase and field values, as they arrived) holds a value. */
  head(reason: string, fields: readonly string[]): SecretReflected | undefined {
    const texts = [reason, ...fields];
    const found = this.needles.find(({ secret }) => texts.some((text) => text.includes(secret.value)));
    return found === undefined ? undefined : new SecretReflected(found.secret, 'head');
  }

  /** The next read of the body: what may go to the client now (maybe nothing), or the value it completes. */
  body(chunk: Buffer): Buffer | SecretReflected {
    const window = this.tail.length === 0 ? chunk : Buffer.concat([this.tail, chunk]);
    for (const { secret, bytes } of this.needles) if (window.includes(bytes)) return new SecretReflected(secret, 'body');
    const cut = Math.max(0, window.length - this.keep);
    // A copy: a slice would hold the whole read's memory until the next one.
    this.tail = Buffer.from(window.subarray(cut));
    return window.subarray(0, cut);
  }

  /** The body ended: what was held back (it holds no value whole), if anything. */
  end(): Buffer | undefined {
    const rest = this.tail;
    this.tail = Buffer.alloc(0);
    return rest.length > 0 ? rest : undefined;
  }
}
