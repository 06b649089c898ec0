/**
 * The response watch (proxy/secrets/value-watch.ts): a value put into a request, anywhere in its
 * response's body and across any split of its reads, is found before any byte of it passes; a
 * body without one passes byte for byte; a head with one is refused; what it holds back between
 * reads is at most the longest value less one byte.
 */
import fc from 'fast-check';
import t from 'tap';
import { holds, splits } from '../support/property.js';
import type { LoadedSecret } from '../../policy/index.js';
import { SecretReflected, ValueWatch } from '../../proxy/secrets/index.js';

const LONG: LoadedSecret = { name: 'GITHUB_TOKEN', value: 'ghp_REALrealREALrealREALrealREALreal1234', placeholder: 'ghp_placeholderPlaceholderPlaceholder0', fingerprint: 'sha256:0123456789ab' };
const SHORT: LoadedSecret = { name: 'NPM_TOKEN', value: 'npm_shortREAL', placeholder: undefined, fingerprint: 'sha256:111111111111' };

/** The body read by read, as the watch passes it: what went out, and the failure if any. */
function run(reads: readonly Buffer[]): { passed: Buffer; error: SecretReflected | undefined } {
  const watch = new ValueWatch([LONG, SHORT]);
  const out: Buffer[] = [];
  for (const read of reads) {
    const step = watch.body(read);
    if (step instanceof SecretReflected) return { passed: Buffer.concat(out), error: step };
    out.push(step);
  }
  out.push(watch.end() ?? Buffer.alloc(0));
  return { passed: Buffer.concat(out), error: undefined };
}

t.test('a head with a value in a field or the reason phrase is refused, naming the secret by fingerprint only', async (t) => {
  const watch = new ValueWatch([LONG]);
  const err = watch.head('OK', ['Access-Control-Allow-Origin', `https://${LONG.value}`]);
  t.type(err, SecretReflected);
  t.equal(err?.code, 'bad_upstream_response');
  t.same(err?.secrets, ['GITHUB_TOKEN sha256:0123456789ab']);
  t.notOk(err?.message.includes(LONG.value), 'the value is not in the message');
  t.type(watch.head(`OK ${LONG.value}`, []), SecretReflected, 'the reason phrase too');
  t.equal(watch.head('OK', ['Content-Type', 'text/plain', 'X-Id', LONG.placeholder!]), undefined, 'a placeholder is no value');
});

t.test('a value in UTF-16 or UTF-32, either byte order, is a value, across any split of the reads', async (t) => {
  await holds(
    t,
    fc.property(fc.constantFrom('utf16le', 'utf16be', 'utf32le', 'utf32be'), fc.array(fc.nat(400), { maxLength: 20 }), (charset, cuts) => {
      const width = charset.startsWith('utf32') ? 4 : 2;
      const text = Buffer.from(`{"id":"${LONG.value}"}`, 'latin1');
      const body = Buffer.alloc(text.length * width);
      for (let i = 0; i < text.length; i += 1) body[i * width + (charset.endsWith('be') ? width - 1 : 0)] = text[i]!;
      const { passed, error } = run(splits(body, cuts));
      // Nothing of the value went out: what passed is at most the wide '{"id":"'.
      return error !== undefined && passed.length <= 7 * width;
    }),
    200,
  );
});

t.test('a value in another case is a value: in a field, and in a body across reads', async (t) => {
  const watch = new ValueWatch([LONG]);
  t.type(watch.head('Unsupported', ['X-Error', `unsupported charset "${LONG.value.toUpperCase()}"`]), SecretReflected, 'upper-cased in a field');
  const { error } = run([Buffer.from(`x ${LONG.value.toLowerCase().slice(0, 20)}`), Buffer.from(`${LONG.value.toLowerCase().slice(20)} y`)]);
  t.type(error, SecretReflected, 'lower-cased in a body, split across two reads');
});

t.test('property: any split of a body with a value fails, and no byte of the value passes', async (t) => {
  await holds(
    t,
    fc.property(fc.string({ maxLength: 200 }), fc.string({ maxLength: 200 }), fc.array(fc.nat(500), { maxLength: 40 }), fc.boolean(), (before, after, cuts, short) => {
      fc.pre(!before.includes('ghp_') && !before.includes('npm_'));
      const value = short ? SHORT.value : LONG.value;
      const body = Buffer.from(`${before}${value}${after}`);
      const { passed, error } = run(splits(body, cuts));
      return error !== undefined && Buffer.from(before).subarray(0, passed.length).equals(passed);
    }),
    300,
  );
});

t.test('property: a body without a value passes byte for byte', async (t) => {
  await holds(
    t,
    fc.property(fc.uint8Array({ maxLength: 3000 }), fc.array(fc.nat(3000), { maxLength: 30 }), (bytes, cuts) => {
      const body = Buffer.from(bytes);
      // As the watch reads it: in any case, without zero bytes.
      const read = body.toString('latin1').toLowerCase().replaceAll('\0', '');
      fc.pre(!read.includes(LONG.value.toLowerCase()) && !read.includes(SHORT.value.toLowerCase()));
      const { passed, error } = run(splits(body, cuts));
      return error === undefined && passed.equals(body);
    }),
    300,
  );
});

t.test('what is held back between reads is at most the longest value, four bytes a character (UTF-32), less one byte', async (t) => {
  const watch = new ValueWatch([LONG, SHORT]);
  let passed = 0;
  for (let i = 0; i < 50; i += 1) {
    const step = watch.body(Buffer.alloc(10_000, 0x61));
    if (!(step instanceof SecretReflected)) passed += step.length;
  }
  t.equal(500_000 - passed, 4 * LONG.value.length - 1);
  t.equal(watch.end()?.length, 4 * LONG.value.length - 1);
  t.equal(watch.end(), undefined, 'nothing after the end');
});

t.test('Basic credentials a value was swapped into are watched for as the value\'s encoding, however cut around it', async (t) => {
  const basic = (text: string): string => `Basic ${Buffer.from(text, 'latin1').toString('base64')}`;
  const sent = ['X-Request-Id', basic(`abc${LONG.value}${'x'.repeat(60)}`)];
  const watch = new ValueWatch([LONG], sent);
  // A quote of the field cut after the value: not the whole credentials, but the value's triples.
  const cut = Buffer.from(`quoted: ${sent[1]!.slice(0, 70)}`);
  t.type(watch.head('OK', ['X-Echo', cut.toString('latin1')]), SecretReflected, 'in a head');
  t.type(watch.body(cut), SecretReflected, 'in a body');
  t.notOk(watch.head('OK', ['X-Echo', basic('abc')]), 'credentials without the value are not');
  // Three alignments at most for a value: twenty prefixes are three encodings.
  const twenty = new ValueWatch([LONG], Array.from({ length: 20 }, (_, i) => ['X', basic(`${'u'.repeat(i)}:${LONG.value}`)]).flat());
  t.equal(twenty.encoded, 3);
  // A value too short for a core of its own is watched for in the whole credentials, each one.
  const tiny: LoadedSecret = { ...SHORT, value: 'abcd' };
  const five = new ValueWatch([tiny], Array.from({ length: 5 }, (_, i) => ['X', basic(`u${i}:abcd`)]).flat());
  t.equal(five.encoded, 5);
  t.ok(five.encoded > ValueWatch.MAX_ENCODED_CREDENTIALS, 'past the most a request may carry (forward.ts refuses it)');
});

t.test('property: a piece of a value cut at one end fails once it holds a quarter of the other end, and none of it passes', async (t) => {
  // An echo cut to a length, or showing only the last characters: the sandbox places the value
  // where the cut falls, so that the piece is all of it but a byte.
  const quarter = Math.max(8, Math.ceil(LONG.value.length / 4));
  await holds(
    t,
    fc.property(fc.integer({ min: quarter, max: LONG.value.length }), fc.boolean(), fc.string({ maxLength: 100 }), fc.array(fc.nat(200), { maxLength: 20 }), (length, atStart, before, cuts) => {
      fc.pre(!before.includes('ghp_') && !before.includes('1234'));
      const piece = atStart ? LONG.value.slice(0, length) : LONG.value.slice(-length);
      const { passed, error } = run(splits(Buffer.from(`${before}${piece}`), cuts));
      return error !== undefined && Buffer.from(before).subarray(0, passed.length).equals(passed);
    }),
    300,
  );
  const watch = new ValueWatch([LONG]);
  t.notOk(watch.head('OK', ['X-Last', LONG.value.slice(-(quarter - 1)), 'X-First', LONG.value.slice(0, quarter - 1)]), 'less than a quarter of either end passes');
  t.type(watch.head('OK', ['X-Cut', LONG.value.slice(0, -1)]), SecretReflected, 'all but the last byte is refused in a head');
});
