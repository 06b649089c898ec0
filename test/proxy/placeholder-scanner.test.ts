/**
 * The body scanner (proxy/secrets/placeholder-scanner.ts): a placeholder anywhere in a body,
 * across any split of its chunks, fails the stream before the chunk that completes it passes; a
 * body without one passes byte for byte; what it keeps between chunks stays bounded.
 */
import { PassThrough, Readable } from 'node:stream';
import fc from 'fast-check';
import t from 'tap';
import { holds, splits } from '../support/property.js';
import { createSecretSet } from '../../policy/index.js';
import { PlaceholderScanner, scannedBody } from '../../proxy/secrets/index.js';

const PLACEHOLDER = 'ghp_placeholderPlaceholderPlaceholder0';
const SET = createSecretSet([
  { name: 'GITHUB_TOKEN', value: 'real-value-real-value', placeholder: PLACEHOLDER, fingerprint: 'sha256:0123456789ab' },
  { name: 'SHORT', value: 'other-real-value', placeholder: 'sk_placeholder_short', fingerprint: 'sha256:111111111111' },
]);

async function run(chunks: readonly Buffer[]): Promise<{ passed: Buffer; error: Error | undefined }> {
  const scanner = new PlaceholderScanner(SET);
  const out: Buffer[] = [];
  scanner.on('data', (c: Buffer) => out.push(c));
  const error = await new Promise<Error | undefined>((resolve) => {
    scanner.once('error', resolve);
    scanner.once('end', () => resolve(undefined));
    Readable.from(chunks, { objectMode: false }).pipe(scanner);
  });
  return { passed: Buffer.concat(out), error };
}

t.test('a placeholder in one chunk fails the stream; nothing of that chunk passes', async (t) => {
  const { passed, error } = await run([Buffer.from('{"a":1,'), Buffer.from(`"t":"${PLACEHOLDER}"}`)]);
  t.match(error?.message, /GITHUB_TOKEN is in the request body/);
  t.notOk(error?.message.includes(PLACEHOLDER));
  t.equal(passed.toString(), '{"a":1,');
});

t.test('property: any split of a body with a placeholder fails, and the placeholder never passes whole', async (t) => {
  await holds(
    t,
    fc.asyncProperty(fc.string({ maxLength: 200 }), fc.string({ maxLength: 200 }), fc.array(fc.nat(500), { maxLength: 40 }), fc.boolean(), async (before, after, cuts, short) => {
      const placeholder = short ? 'sk_placeholder_short' : PLACEHOLDER;
      const body = Buffer.from(`${before}${placeholder}${after}`);
      const { passed, error } = await run(splits(body, cuts));
      return error !== undefined && !passed.includes(placeholder);
    }),
    300,
  );
});

t.test('property: a body without a placeholder passes byte for byte', async (t) => {
  await holds(
    t,
    fc.asyncProperty(fc.uint8Array({ maxLength: 3000 }), fc.array(fc.nat(3000), { maxLength: 30 }), async (bytes, cuts) => {
      const body = Buffer.from(bytes);
      fc.pre(!body.includes(PLACEHOLDER) && !body.includes('sk_placeholder_short'));
      const { passed, error } = await run(splits(body, cuts));
      return error === undefined && passed.equals(body);
    }),
    300,
  );
});

t.test('what is kept between chunks is at most the longest placeholder less one byte', async (t) => {
  const scanner = new PlaceholderScanner(SET);
  scanner.resume();
  for (let i = 0; i < 50; i += 1) scanner.write(Buffer.alloc(10_000, 0x61));
  t.equal((scanner as unknown as { tail: Buffer }).tail.length, PLACEHOLDER.length - 1);
  scanner.end();
});

t.test('without placeholders the body is not wrapped', async (t) => {
  const body = Readable.from([]);
  t.equal(scannedBody(body, undefined), body);
  t.equal(scannedBody(body, createSecretSet([{ name: 'A', value: 'v', placeholder: undefined, fingerprint: 'sha256:0' }])), body);
  t.type(scannedBody(Readable.from([]), SET), PlaceholderScanner);
});

t.test('a placeholder after every consumer of the body has gone fails the scan without ending the process', async (t) => {
  // As after a request that failed before undici sent its body: the client's bytes still flow in,
  // and nothing but the scanner's own listener hears its failure.
  const source = new PassThrough();
  const body = scannedBody(source, SET);
  t.not(body, source, 'scanned');
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown): void => void uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  t.teardown(() => void process.off('uncaughtException', onUncaught));
  const failed = new Promise<void>((resolve) => body.once('close', resolve));
  source.write(Buffer.from(`a body with ${PLACEHOLDER} in it`));
  await failed;
  await new Promise((resolve) => setImmediate(resolve));
  t.same(uncaught, [], 'no uncaught exception');
  t.ok((body as PlaceholderScanner).destroyed, 'the scan failed, and its stream ended');
});
