/**
 * The path of a request, in the one form path rules compare, or why there is none. Pure.
 *
 * A path rule (`/repos/org/*`) is only as good as the agreement between the proxy and the server
 * on what a path says. Servers and frameworks differ on encoded slashes (`%2F` split or not),
 * backslashes (a separator on Windows-flavoured stacks), dot segments (resolved before or after
 * routing, `..;` read as `..` by Tomcat), double encoding (`%252e` decoded twice), overlong and
 * compatibility forms of `.` and `/` (`%C0%AE`, a full-width `．`), NUL and empty segments. Each of
 * these lets a path that starts with an allowed prefix land outside it on some server, so a path
 * with any of them is refused, never repaired. What is left has a single meaning (RFC 3986 §6.2.2):
 * percent-encoded unreserved characters are decoded (`%7E` is `~`), other escapes get upper-case
 * hex, and nothing else changes. That form is both compared and forwarded, so the server gets the
 * very path that was matched.
 */

export type PathNormal =
  | {
      readonly ok: true;
      /** The normal form of the path (what is compared and forwarded). */
      readonly path: string;
      /** The query with its `?`, or ''; never compared, forwarded as sent. */
      readonly query: string;
    }
  | { readonly ok: false; readonly problem: string };

// RFC 3986 §2.3: unreserved characters; their escapes mean the character itself.
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;
// RFC 3986 §3.3: what a path segment may hold as it is (pchar without pct-encoded), and "/".
const PATH_CHAR = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/]$/;
const HEX = /^[0-9A-Fa-f]{2}$/;

const utf8 = new TextDecoder('utf-8', { fatal: true });

function refused(problem: string): PathNormal {
  return { ok: false, problem };
}

/** What a raw byte that is not a path character is, for the problem. */
function rawByteProblem(code: number, char: string): string {
  if (code === 0x5c) return 'a backslash ("\\"), which some servers read as "/"';
  if (code < 0x20 || code === 0x7f) return `a control byte (0x${code.toString(16).padStart(2, '0')})`;
  if (code > 0x7e) return 'a character outside ASCII (percent-encode it as UTF-8)';
  return `"${char}", which is not allowed unencoded in a path (RFC 3986 §3.3)`;
}

/** What an escape that cannot stand is, or undefined. `next` is the text after it. */
function escapeProblem(byte: number, next: string): string | undefined {
  if (byte === 0x2f) return 'an encoded "/" (%2F), which some servers split on and others do not';
  if (byte === 0x5c) return 'an encoded backslash (%5C), which some servers read as "/"';
  if (byte === 0x3b) return 'an encoded ";" (%3B), which servers that decode before dropping ";" parameters read as one ("..%3Bx" as "..")';
  if (byte < 0x20 || byte === 0x7f) return `an encoded control byte (%${byte.toString(16).padStart(2, '0').toUpperCase()})`;
  if (byte === 0x25 && HEX.test(next.slice(0, 2))) return 'a double-encoded escape (%25 and two hex digits), which a server that decodes twice reads as another character';
  return undefined;
}

/**
 * Encoded bytes outside ASCII must be UTF-8 (an overlong `%C0%AE` is "." to some decoders), and
 * none may be a compatibility form of ".", "/", "\", "%" or ";" (a full-width "．" is "." after
 * NFKC; a full-width "；", or U+037E even after NFC, is ";", so `..；x` is `..` to a server that
 * normalises before dropping parameters, as `..%3Bx` is).
 */
function nonAsciiProblem(bytes: readonly number[]): string | undefined {
  let text: string;
  try {
    text = utf8.decode(Uint8Array.from(bytes));
  } catch {
    return 'percent-encoded bytes that are not UTF-8 (an overlong form can read as "." or "/")';
  }
  for (const char of text) {
    if (/[./\\%;]/.test(char.normalize('NFKC'))) return `an encoded "${char}", which some servers normalise to "${char.normalize('NFKC')}"`;
  }
  return undefined;
}

/** Decodes unreserved escapes and upper-cases the others; refuses what cannot stand. */
function decodePath(raw: string): PathNormal {
  let out = '';
  // Escaped bytes outside ASCII, collected until their run ends, then judged as UTF-8.
  let run: number[] = [];
  const endRun = (): string | undefined => {
    const problem = run.length === 0 ? undefined : nonAsciiProblem(run);
    run = [];
    return problem;
  };
  for (let i = 0; i < raw.length; i += 1) {
    const char = raw[i]!;
    if (char !== '%') {
      const problem = endRun() ?? (PATH_CHAR.test(char) ? undefined : rawByteProblem(raw.charCodeAt(i), char));
      if (problem !== undefined) return refused(problem);
      out += char;
      continue;
    }
    const hex = raw.slice(i + 1, i + 3);
    if (!HEX.test(hex)) return refused('a "%" that is not followed by two hex digits');
    const byte = Number.parseInt(hex, 16);
    const decoded = String.fromCharCode(byte);
    i += 2;
    const problem = escapeProblem(byte, raw.slice(i + 1)) ?? (byte < 0x80 ? endRun() : undefined);
    if (problem !== undefined) return refused(problem);
    if (byte >= 0x80) run.push(byte);
    out += UNRESERVED.test(decoded) ? decoded : `%${hex.toUpperCase()}`;
  }
  const problem = endRun();
  return problem === undefined ? { ok: true, path: out, query: '' } : refused(problem);
}

/**
 * Segments that servers resolve differently: an empty one (`//`, before the last) and one of dots
 * only (`.`, `..`, `...`), also before a `;` parameter (`..;`, which Tomcat reads as `..`; `;x`,
 * which it reads as empty).
 */
function segmentProblem(path: string): string | undefined {
  const segments = path.split('/');
  for (let i = 1; i < segments.length; i += 1) {
    const segment = segments[i]!;
    if (segment === '' && i < segments.length - 1) return 'an empty segment ("//")';
    const name = segment.split(';', 1)[0]!;
    if (name === '' && segment !== '') return 'an empty segment with parameters (";" first), which servers that drop parameters read as "//"';
    if (/^\.+$/.test(name)) return `a "${name}" segment (raw or percent-encoded), which servers resolve differently`;
  }
  return undefined;
}

/** The normal form of a request target in origin-form (`/path?query`), or why it has none. */
export function normaliseRequestPath(target: string): PathNormal {
  if (target.includes('#')) return refused('a fragment ("#") in the request target');
  const q = target.indexOf('?');
  const raw = q === -1 ? target : target.slice(0, q);
  if (!raw.startsWith('/')) return refused('a path that does not start with "/"');
  const decoded = decodePath(raw);
  if (!decoded.ok) return decoded;
  const problem = segmentProblem(decoded.path);
  if (problem !== undefined) return refused(problem);
  return { ok: true, path: decoded.path, query: q === -1 ? '' : target.slice(q) };
}
