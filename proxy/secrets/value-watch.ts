/**
 * A response from a bound host, watched for the secrets the proxy put into its request: a host
 * that reflects what it is sent (CORS echoing the Origin, an API echoing a request id, an error
 * page quoting a header) would otherwise hand the real value to the sandbox, which put its
 * placeholder in any header it liked. The head is refused whole when a field or the reason phrase
 * holds a value; the body is passed on with the last (4 x longest value - 1) bytes held back, so that
 * no piece of a value straddling two reads reaches the client before the value is found whole, and
 * on a value the response is cut there.
 *
 * A host that quotes only part of what it is sent (a field cut to a length, a display of its
 * last characters) would hand back all of a value but a byte, with the sandbox placing the value
 * where the cut falls: each text watched for is also watched for by its first and last quarter
 * (`ends`), so such a piece passes only when it holds less than that of either end.
 *
 * It sees the raw bytes, the Basic credentials the proxy itself encoded a value into, as they
 * went out, and the credential in a value that is Basic credentials already encoded, as a host
 * decodes it: a value the host encodes (base64, escapes) passes. It reads them in any case (ASCII
 * letters folded): a host that quotes a field upper- or lower-cased (body-parser's 415 names the
 * charset it could not decode upper-cased) hands back a hex value whole, and any other value but
 * its letters' case. And it reads a body without its zero bytes: a host that writes in the charset
 * a request asks for (ASP.NET Core's JSON by Accept-Charset, Spring's Jackson by Accept's charset
 * parameter) hands back an ASCII value in UTF-16 or UTF-32 as its characters with zero bytes
 * between them; so the body is held back by four bytes a character.
 */
import { CodedError } from '../../common/index.js';
import { secretLabel, type LoadedSecret } from '../../policy/index.js';

/** A response that holds a secret the proxy put into its request; `secrets` names it by fingerprint. */
export class SecretReflected extends CodedError<'bad_upstream_response'> {
  readonly secrets: readonly string[];

  constructor(secret: LoadedSecret, where: string) {
    // The message goes to the workload: the name alone, never the fingerprint (policy/secrets.ts, refusal).
    super('bad_upstream_response', `the response ${where} holds the value of secret ${secret.name}, or its first or last characters, which the proxy put into the request: a host that reflects what it is sent would hand it to the workload`);
    this.secrets = [secretLabel(secret)];
  }
}

/** Basic credentials as a field value carries them (policy/secrets.ts swaps a value inside such). */
const BASIC = /^\s*basic\s+([A-Za-z0-9+/_=-]+)\s*$/i;

/** Shortest encoded core watched for alone; a shorter one is watched for in the whole credentials. */
const MIN_CORE_CHARS = 8;

/**
 * Shortest end of a text watched for alone: a few characters of a value (a vendor prefix such as
 * `ghp_`, the last four a page shows) turn up in responses that hold no value.
 */
const MIN_END_CHARS = 8;

/**
 * Response fields that hash the body (RFC 9530's digests, Content-MD5, and an ETag, which Express
 * and others make a hash of the body): the head goes out at the first body bytes, before the
 * watch has read the rest, so with a host that quotes a field cut to a length, the sandbox placing
 * the cut after each character of a value in turn, each head would hash a body it knows but for
 * one character, found by trying the few it can be: the whole value, one character a request.
 */
const BODY_DIGESTS = new Set(['etag', 'content-md5', 'digest', 'content-digest', 'repr-digest']);

/**
 * A text's first and last quarter (at least MIN_END_CHARS), watched for beside it: a piece of
 * the text cut at one end holds the other end whole, unless it is under a quarter of the text.
 * Its middle alone is reached only by a cut at both ends, which the sandbox cannot ask of the
 * host (forward.ts drops Range).
 */
function ends(text: string): string[] {
  const length = Math.max(MIN_END_CHARS, Math.ceil(text.length / 4));
  return length >= text.length ? [] : [text.slice(0, length), text.slice(-length)];
}

/**
 * What of `credentials`' canonical base64 (as the proxy writes it) encodes `value`, at each place
 * the value is: the characters that encode its whole triples, which read the same whatever the
 * sandbox put before and after it. A host that quotes the field only in part (cut to a length)
 * still hands back these, when they are not the whole credentials.
 */
function encodedCores(credentials: string, value: string): string[] {
  const canonical = Buffer.from(credentials, 'latin1').toString('base64');
  const cores: string[] = [];
  for (let at = credentials.indexOf(value); at !== -1; at = credentials.indexOf(value, at + 1)) {
    const start = Math.ceil(at / 3);
    const end = Math.floor((at + value.length) / 3);
    cores.push((end - start) * 4 >= MIN_CORE_CHARS ? canonical.slice(start * 4, end * 4) : canonical);
  }
  return cores;
}

/**
 * What a value that is itself Basic credentials, encoded (an operator's `Basic {}` binding of
 * `base64(user:token)`), reads as once a host decodes it: the password, or the user when there is
 * none (an API key sent as the user). A host that quotes what it decoded (the user it found, a
 * diagnostic page) hands that back in clear. A user name beside a password is no secret, and hosts
 * quote it for good reasons, so it is not watched for.
 */
function decodedCredential(value: string): string | undefined {
  const bytes = Buffer.from(value, 'base64');
  if (bytes.toString('base64').replace(/=+$/, '') !== value.replace(/=+$/, '')) return undefined;
  const text = bytes.toString('latin1');
  const colon = text.indexOf(':');
  if (colon === -1 || !/^[\x20-\x7e]+$/.test(text)) return undefined;
  const secret = colon === text.length - 1 ? text.slice(0, colon) : text.slice(colon + 1);
  return secret.length >= MIN_END_CHARS ? secret : undefined;
}

/**
 * `text` (one character a byte, Latin-1) lower-cased. Latin-1 letters fold within Latin-1, one
 * character for one, so no byte turns into an ASCII one that a value (printable ASCII) holds.
 */
function folded(text: string): string {
  return text.toLowerCase();
}

/** Bytes a character of a value takes at most in a body: UTF-32's four. */
const WIDEST = 4;

export class ValueWatch {
  /** Lower-cased: matched against the text lower-cased (`folded`). */
  private readonly needles: readonly { readonly secret: LoadedSecret; readonly text: string }[];
  private readonly keep: number;
  /**
   * How many encoded credentials are watched for besides the values: each is searched for in
   * every read of the body, so a request with more than MAX_ENCODED_CREDENTIALS is refused
   * (forward.ts) rather than have the proxy scan its response hundreds of times over.
   */
  encoded = 0;
  static readonly MAX_ENCODED_CREDENTIALS = 4;
  private tail: Buffer = Buffer.alloc(0);

  /**
   * `sent` is the request's fields as they went upstream (a flat name/value list): a value the
   * proxy swapped into Basic credentials went out base64-encoded, in whatever field the sandbox
   * chose, and a host that reflects that field hands back the encoding, so the encoded
   * credentials are watched for as well as the value.
   */
  constructor(secrets: readonly LoadedSecret[], sent: readonly string[] = []) {
    const texts = secrets.flatMap((secret) => [secret.value, decodedCredential(secret.value)].flatMap((text) => (text === undefined ? [] : [{ secret, text }])));
    for (let i = 1; i < sent.length; i += 2) {
      const encoded = BASIC.exec(sent[i]!)?.[1];
      if (encoded === undefined) continue;
      const credentials = Buffer.from(encoded, 'base64').toString('latin1');
      for (const secret of secrets) {
        for (const text of encodedCores(credentials, secret.value)) {
          if (texts.some((n) => n.text === text)) continue;
          texts.push({ secret, text });
          this.encoded += 1;
        }
      }
    }
    const needles = new Map<string, LoadedSecret>();
    for (const { secret, text } of texts) for (const needle of [text, ...ends(text)]) if (!needles.has(needle)) needles.set(needle, secret);
    this.needles = [...needles].map(([text, secret]) => ({ secret, text: folded(text) }));
    this.keep = Math.max(0, ...this.needles.map((n) => WIDEST * n.text.length - 1));
  }

  /** Whether a response head (its reason phrase and field values, as they arrived) holds a value. */
  head(reason: string, fields: readonly string[]): SecretReflected | undefined {
    const texts = [reason, ...fields].map(folded);
    const found = this.needles.find((needle) => texts.some((text) => text.includes(needle.text)));
    return found === undefined ? undefined : new SecretReflected(found.secret, 'head');
  }

  /**
   * The fields of a head that go to the client (`fields`, a flat name/value list): no BODY_DIGESTS,
   * which would hand over a value cut from the body (the head leaves before the body is read).
   */
  passed(fields: readonly string[]): string[] {
    const out: string[] = [];
    for (let i = 0; i < fields.length; i += 2) if (!BODY_DIGESTS.has(fields[i]!.toLowerCase())) out.push(fields[i]!, fields[i + 1]!);
    return out;
  }

  /** The next read of the body: what may go to the client now (maybe nothing), or the value it completes. */
  body(chunk: Buffer): Buffer | SecretReflected {
    const window = this.tail.length === 0 ? chunk : Buffer.concat([this.tail, chunk]);
    // UTF-16 and UTF-32 write an ASCII character as its byte and zero bytes: without them, the value.
    const text = folded(window.toString('latin1')).replaceAll('\0', '');
    for (const needle of this.needles) if (text.includes(needle.text)) return new SecretReflected(needle.secret, 'body');
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
