/**
 * The normal form of a request path (policy/request-path.ts): what path rules compare. Every
 * spelling that servers read differently is refused with a problem naming it; what is left is
 * decoded only where RFC 3986 says the two spellings are the same, and a property test checks
 * that no allowed path can leave its prefix on a server that decodes, splits and resolves in any
 * of the lenient ways real servers do.
 */
import fc from 'fast-check';
import t from 'tap';
import { normaliseRequestPath } from '../../policy/index.js';
import { holds } from '../support/property.js';

t.test('plain paths keep their spelling; unreserved escapes are decoded, others upper-cased', async (t) => {
  const rows: { name: string; target: string; path: string; query: string }[] = [
    { name: 'the root', target: '/', path: '/', query: '' },
    { name: 'a plain path', target: '/repos/org/x', path: '/repos/org/x', query: '' },
    { name: 'a trailing slash stays', target: '/repos/org/', path: '/repos/org/', query: '' },
    { name: 'the query is split off, as sent', target: '/a?x=/../b%2f&y', path: '/a', query: '?x=/../b%2f&y' },
    { name: 'an empty query', target: '/a?', path: '/a', query: '?' },
    { name: 'unreserved escapes decoded', target: '/%72epos/%7Euser/a%2Db%5F%2e', path: '/repos/~user/a-b_.', query: '' },
    { name: 'a reserved escape kept, hex upper-cased', target: '/a%3fb/c%3a%40', path: '/a%3Fb/c%3A%40', query: '' },
    { name: 'a lone percent, encoded', target: '/100%25', path: '/100%25', query: '' },
    { name: 'UTF-8 kept encoded', target: '/caf%c3%a9', path: '/caf%C3%A9', query: '' },
    { name: 'sub-delims and : @ as they are', target: "/a!$&'()*+,;=:@b", path: "/a!$&'()*+,;=:@b", query: '' },
    { name: 'dots inside a segment', target: '/a.b/.c/d./..e', path: '/a.b/.c/d./..e', query: '' },
    { name: 'a parameter on a name', target: '/a;v=1/b', path: '/a;v=1/b', query: '' },
  ];
  for (const row of rows) t.same(normaliseRequestPath(row.target), { ok: true, path: row.path, query: row.query }, row.name);
});

t.test('ambiguous spellings are refused, each with its problem', async (t) => {
  const rows: { name: string; target: string; problem: RegExp }[] = [
    { name: 'an encoded slash', target: '/repos/org/..%2f..%2fother', problem: /encoded "\/" \(%2F\)/ },
    { name: 'an encoded slash, upper case', target: '/a%2Fb', problem: /%2F/ },
    { name: 'an encoded backslash', target: '/a%5cb', problem: /encoded backslash/ },
    { name: 'an encoded parameter delimiter', target: '/repos/org/..%3bx/y', problem: /encoded ";" \(%3B\)/ },
    { name: 'an empty name with a parameter', target: '/repos/org/;x/y', problem: /empty segment with parameters/ },
    { name: 'a backslash', target: '/a\\..\\b', problem: /backslash/ },
    { name: 'a dot-dot segment', target: '/repos/org/../x', problem: /"\.\." segment/ },
    { name: 'an encoded dot-dot segment', target: '/repos/org/%2e%2e/x', problem: /"\.\." segment/ },
    { name: 'a half-encoded dot-dot', target: '/repos/org/.%2E/x', problem: /"\.\." segment/ },
    { name: 'a dot segment', target: '/repos/./org', problem: /"\." segment/ },
    { name: 'a final dot-dot', target: '/repos/org/..', problem: /"\.\." segment/ },
    { name: 'dots only', target: '/repos/.../x', problem: /"\.\.\." segment/ },
    { name: 'a dot-dot with a parameter (Tomcat)', target: '/repos/org/..;/x', problem: /"\.\." segment/ },
    { name: 'an empty segment at the start', target: '//repos/org', problem: /empty segment/ },
    { name: 'an empty segment inside', target: '/repos//org', problem: /empty segment/ },
    { name: 'an encoded NUL', target: '/repos/org/x%00', problem: /encoded control byte \(%00\)/ },
    { name: 'an encoded newline', target: '/a%0d%0aX:1', problem: /control byte \(%0D\)/ },
    { name: 'an encoded DEL', target: '/a%7f', problem: /control byte \(%7F\)/ },
    { name: 'a raw control byte', target: '/a\x01b', problem: /control byte \(0x01\)/ },
    { name: 'a raw NUL', target: '/a\x00', problem: /control byte \(0x00\)/ },
    { name: 'a space', target: '/a b', problem: /" ", which is not allowed/ },
    { name: 'a percent without hex', target: '/a%zz', problem: /not followed by two hex digits/ },
    { name: 'a cut escape', target: '/a%2', problem: /not followed by two hex digits/ },
    { name: 'an IIS %u escape', target: '/a%u002e', problem: /not followed by two hex digits/ },
    { name: 'a double-encoded dot', target: '/a/%252e%252e/b', problem: /double-encoded/ },
    { name: 'a double-encoded slash', target: '/a%252fb', problem: /double-encoded/ },
    { name: 'an overlong dot', target: '/a/%c0%ae%c0%ae/b', problem: /not UTF-8/ },
    { name: 'a lone continuation byte', target: '/a%80', problem: /not UTF-8/ },
    { name: 'a cut UTF-8 sequence', target: '/a%c3/b', problem: /not UTF-8/ },
    { name: 'a full-width dot', target: '/a/%ef%bc%8e%ef%bc%8e/b', problem: /normalise to "\."/ },
    { name: 'a full-width solidus', target: '/a%ef%bc%8fb', problem: /normalise to "\/"/ },
    { name: 'a full-width semicolon after a dot-dot (NFKC, then Tomcat)', target: '/repos/org/..%ef%bc%9bx/other', problem: /normalise to ";"/ },
    { name: 'a Greek question mark after a dot-dot (";" even under NFC)', target: '/repos/org/..%cd%be/other', problem: /normalise to ";"/ },
    { name: 'raw non-ASCII', target: '/caf\u00e9', problem: /outside ASCII/ },
    { name: 'a fragment', target: '/a#b', problem: /fragment/ },
    { name: 'not a path', target: 'a/b', problem: /start with "\/"/ },
    { name: 'an asterisk-form target', target: '*', problem: /start with "\/"/ },
    { name: 'a query only', target: '?a', problem: /start with "\/"/ },
    { name: 'a bracket', target: '/a[0]', problem: /"\[", which is not allowed/ },
  ];
  for (const row of rows) {
    const normal = normaliseRequestPath(row.target);
    t.equal(normal.ok, false, row.name);
    if (!normal.ok) t.match(normal.problem, row.problem, row.name);
  }
});

/**
 * What a lenient server may make of a path: each way decodes percent-escapes (once or twice, an
 * overlong dot or slash as what it spells), may read "\" as "/" and NFKC-normalise, drops `;`
 * parameters (Tomcat), merges empty segments and resolves dot segments (RFC 3986 §5.2.4).
 */
function serverViews(path: string): string[] {
  const decodeOnce = (s: string): string =>
    s
      .replace(/%c0%ae/gi, '.')
      .replace(/%c0%af/gi, '/')
      .replace(/(%[0-9a-f]{2})+/gi, (run) => {
        try {
          return decodeURIComponent(run);
        } catch {
          return run;
        }
      });
  const resolve = (s: string, backslash: boolean, params: boolean): string => {
    let text = s.normalize('NFKC');
    if (backslash) text = text.replace(/\\/g, '/');
    const out: string[] = [];
    for (let segment of text.split('/').slice(1)) {
      if (params) segment = segment.split(';')[0]!;
      if (segment === '' || segment === '.') continue;
      if (segment === '..') out.pop();
      else out.push(segment);
    }
    return `/${out.join('/')}${text.endsWith('/') ? '/' : ''}`;
  };
  const views: string[] = [];
  for (const decoded of [decodeOnce(path), decodeOnce(decodeOnce(path))]) {
    for (const backslash of [false, true]) for (const params of [false, true]) views.push(resolve(decoded, backslash, params));
  }
  return views;
}

// Pieces of segments, joined by "/": plain ones, and each spelling some server reads as "." or "/".
const PLAIN = ['a', 'b', 'org', 'repos', '%41', '%7e', '%2e', '.a', 'a.', 'x;v=1', '%25', 'caf%c3%a9', '%3a'];
const HOSTILE = ['.', '..', '...', '%2E%2e', '.%2e', '%2f', '%2F', '%5c', '\\', '', ';x', '..;', '..;x', '..%3bx', '%252e', '%252f', '%c0%ae', '%c0%af', '%ef%bc%8e', '%ef%bc%8f', '..%ef%bc%9bx', '..%cd%be', 'x%00', 'a%2f..', '%', '%zz', '?', '#', '..?', '%2e%2e;'];
const PIECES = [...PLAIN, ...HOSTILE];
const piece = fc.oneof({ arbitrary: fc.constantFrom(...PLAIN), weight: 4 }, { arbitrary: fc.constantFrom(...HOSTILE), weight: 1 });

t.test('property: a path allowed under a prefix stays under it on every lenient server', async (t) => {
  const prefix = '/repos/org/';
  const paths = fc.tuple(fc.boolean(), fc.array(piece, { minLength: 1, maxLength: 8 })).map(([under, pieces]) => `${under ? prefix : '/'}${pieces.join('/')}`);
  let allowed = 0;
  await holds(
    t,
    fc.property(paths, (path) => {
      const normal = normaliseRequestPath(path);
      if (!normal.ok || !normal.path.startsWith(prefix)) return true;
      allowed += 1;
      // The normal form is what is forwarded: its every reading stays below the prefix.
      return serverViews(normal.path).every((view) => view.startsWith(prefix));
    }),
    20_000,
  );
  t.ok(allowed > 1_000, `many generated paths were allowed (${allowed}), so the property was exercised`);
});

t.test('property: the normal form is its own normal form, and the same path to a strict server', async (t) => {
  const paths = fc.array(fc.constantFrom(...PIECES), { minLength: 1, maxLength: 6 }).map((pieces) => `/${pieces.join('/')}`);
  await holds(
    t,
    fc.property(paths, (path) => {
      const normal = normaliseRequestPath(path);
      if (!normal.ok) return true;
      const again = normaliseRequestPath(normal.path);
      // Decoding every escape of both spellings gives the same text: only equivalent spellings changed.
      const decode = (s: string): string => s.replace(/(%[0-9A-Fa-f]{2})+/g, (run) => decodeURIComponent(run));
      return again.ok && again.path === normal.path && decode(path.split('?')[0]!) === decode(normal.path);
    }),
    5_000,
  );
});
