import t from 'tap';
import { parseHostName } from '../../policy/index.js';

const long63 = 'a'.repeat(63);
const cases: { name: string; raw: string; want: string | 'malformed_host' | 'ip_literal' }[] = [
  { name: 'lower-cases', raw: 'EXAMPLE.Com', want: 'example.com' },
  { name: 'strips one trailing dot', raw: 'example.com.', want: 'example.com' },
  { name: 'two trailing dots leave an empty label', raw: 'example.com..', want: 'malformed_host' },
  { name: 'empty inner label', raw: 'a..b', want: 'malformed_host' },
  { name: 'leading dot', raw: '.a', want: 'malformed_host' },
  { name: 'only a dot', raw: '.', want: 'malformed_host' },
  { name: 'empty', raw: '', want: 'malformed_host' },
  { name: '63-octet label is fine', raw: `${long63}.com`, want: `${long63}.com` },
  { name: '64-octet label', raw: `a${long63}.com`, want: 'malformed_host' },
  { name: '253-octet name is fine', raw: `${long63}.${long63}.${long63}.${'a'.repeat(61)}`, want: `${long63}.${long63}.${long63}.${'a'.repeat(61)}` },
  { name: '254-octet name', raw: `${long63}.${long63}.${long63}.${'a'.repeat(62)}`, want: 'malformed_host' },
  { name: '253 octets plus the trailing dot is fine', raw: `${long63}.${long63}.${long63}.${'a'.repeat(61)}.`, want: `${long63}.${long63}.${long63}.${'a'.repeat(61)}` },
  { name: 'asterisk', raw: '*.example.com', want: 'malformed_host' },
  { name: 'percent escape', raw: 'ex%61mple.com', want: 'malformed_host' },
  { name: 'at sign', raw: 'a@example.com', want: 'malformed_host' },
  { name: 'backslash', raw: 'a\\example.com', want: 'malformed_host' },
  { name: 'control byte', raw: 'a\u0001.com', want: 'malformed_host' },
  { name: 'space', raw: 'a b.com', want: 'malformed_host' },
  { name: 'NUL', raw: 'example.com\u0000.evil', want: 'malformed_host' },
  { name: 'DEL', raw: 'a\u007f.com', want: 'malformed_host' },
  { name: 'label starts with hyphen', raw: '-a.com', want: 'malformed_host' },
  { name: 'label ends with hyphen', raw: 'a-.com', want: 'malformed_host' },
  { name: 'inner hyphen is fine', raw: 'a-b.com', want: 'a-b.com' },
  { name: 'underscore is tolerated', raw: '_dmarc.example.com', want: '_dmarc.example.com' },
  { name: 'enclosed alphanumerics are not mapped', raw: 'ⓔⓧⓐⓜⓟⓛⓔ.com', want: 'malformed_host' },
  { name: 'fullwidth dot is not a dot', raw: 'example．com', want: 'malformed_host' },
  { name: 'Unicode letter', raw: 'bücher.example', want: 'malformed_host' },
  { name: 'punycode is a name', raw: 'xn--bcher-kva.example', want: 'xn--bcher-kva.example' },
  { name: 'colon', raw: 'a:b', want: 'malformed_host' },
  // IP literals, every spelling some resolver reads as an address.
  { name: 'dotted quad', raw: '127.0.0.1', want: 'ip_literal' },
  { name: 'dotted quad, trailing dot', raw: '127.0.0.1.', want: 'ip_literal' },
  { name: 'decimal dword', raw: '2130706433', want: 'ip_literal' },
  { name: 'hex dword', raw: '0x7f000001', want: 'ip_literal' },
  { name: 'hex short', raw: '0x7f.1', want: 'ip_literal' },
  { name: 'octal', raw: '0177.0.0.1', want: 'ip_literal' },
  { name: 'octal dword', raw: '017700000001', want: 'ip_literal' },
  { name: 'short form', raw: '127.1', want: 'ip_literal' },
  { name: 'zero', raw: '0', want: 'ip_literal' },
  { name: 'unspecified', raw: '0.0.0.0', want: 'ip_literal' },
  { name: 'upper-case hex', raw: '0X7F.1', want: 'ip_literal' },
  { name: 'name ending in a number', raw: 'foo.123', want: 'ip_literal' },
  { name: 'name ending in hex', raw: 'foo.0xff', want: 'ip_literal' },
  { name: 'out-of-range quad', raw: '256.256.256.256', want: 'ip_literal' },
  { name: 'five numeric parts', raw: '1.2.3.4.5', want: 'malformed_host' },
  { name: 'digits inside a name are fine', raw: '123.example.com', want: '123.example.com' },
  { name: 'hex-looking last label without 0x is a name', raw: 'example.cafe', want: 'example.cafe' },
  { name: 'bracketed IPv6', raw: '[::1]', want: 'ip_literal' },
  { name: 'bracketed mapped IPv4', raw: '[::ffff:127.0.0.1]', want: 'ip_literal' },
  { name: 'bracketed with zone id', raw: '[fe80::1%25eth0]', want: 'ip_literal' },
  { name: 'zone-id wildcard bypass', raw: '[::ffff:1.2.3.4%x.wild.example.com]', want: 'ip_literal' },
  { name: 'unterminated bracket', raw: '[::1', want: 'malformed_host' },
  { name: 'empty brackets', raw: '[]', want: 'malformed_host' },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const got = parseHostName(c.raw);
    if (c.want === 'malformed_host' || c.want === 'ip_literal') {
      t.equal(got.ok, false);
      if (!got.ok) t.equal(got.reason, c.want);
    } else {
      t.same(got, { ok: true, name: c.want });
    }
  });
}

t.test('never throws and never accepts a non-ASCII byte', async (t) => {
  const fc = await import('fast-check');
  fc.assert(
    fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (s) => {
      const got = parseHostName(s);
      if (got.ok) return /^[a-z0-9_.-]+$/.test(got.name) && got.name.length <= 253;
      return true;
    }),
    { numRuns: 5_000 },
  );
  t.pass('property held');
});

t.test('a character that lower-cases to ASCII is still refused', async (t) => {
  // U+212A KELVIN SIGN lower-cases to "k": checking after lower-casing would read this as key.com.
  t.match(parseHostName('\u212aey.com'), { ok: false, reason: 'malformed_host' });
});
