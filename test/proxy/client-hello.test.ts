/**
 * The ClientHello reader on its own: real hellos from OpenSSL (Node's TLS client), re-recorded
 * and re-segmented every way a client may legally send them, and hand-built hellos that break one
 * rule each. Every way of cutting the same bytes must give the same answer.
 */
import fc from 'fast-check';
import t from 'tap';
import { ClientHelloReader, MAX_HELLO_BYTES, MAX_HELLO_RECORDS, type HelloResult } from '../../proxy/index.js';
import { captureHello } from '../support/tls-hello.js';

/** The handshake message inside a single-record hello. */
function messageOf(record: Buffer): Buffer {
  return record.subarray(5, 5 + record.readUInt16BE(3));
}

/** Wraps handshake bytes in TLS records, cut at the given offsets of the message. */
function records(message: Buffer, cuts: readonly number[] = [], version = 0x0301): Buffer {
  const bounds = [0, ...cuts, message.length];
  const out: Buffer[] = [];
  for (let i = 0; i + 1 < bounds.length; i++) {
    const part = message.subarray(bounds[i], bounds[i + 1]);
    const header = Buffer.from([0x16, version >> 8, version & 0xff, 0, 0]);
    header.writeUInt16BE(part.length, 3);
    out.push(header, part);
  }
  return Buffer.concat(out);
}

function read(bytes: Buffer, chunk = bytes.length): HelloResult {
  const reader = new ClientHelloReader();
  let result: HelloResult = { kind: 'incomplete' };
  for (let at = 0; at < bytes.length && result.kind === 'incomplete'; at += chunk) result = reader.push(bytes.subarray(at, at + chunk));
  return result;
}

function nameOf(result: HelloResult): string | undefined {
  return result.kind === 'hello' ? result.serverName?.toString('latin1') : undefined;
}

const u16 = (n: number): Buffer => Buffer.from([n >> 8, n & 0xff]);
const u24 = (n: number): Buffer => Buffer.from([n >> 16, (n >> 8) & 0xff, n & 0xff]);
const ext = (type: number, data: Buffer): Buffer => Buffer.concat([u16(type), u16(data.length), data]);
/** A server_name extension body with the given (type, name) entries. */
const sniData = (...entries: [number, string][]): Buffer => {
  const list = Buffer.concat(entries.map(([type, name]) => Buffer.concat([Buffer.from([type]), u16(name.length), Buffer.from(name, 'latin1')])));
  return Buffer.concat([u16(list.length), list]);
};

/** A minimal ClientHello handshake message (header included) with the given extensions block. */
function hello(extensions: Buffer | undefined, tweak: { version?: number; sessionId?: number; suites?: number; compression?: number } = {}): Buffer {
  const body = Buffer.concat([
    u16(tweak.version ?? 0x0303),
    Buffer.alloc(32, 7),
    Buffer.from([tweak.sessionId ?? 0]),
    Buffer.alloc(tweak.sessionId ?? 0, 1),
    u16(tweak.suites ?? 2),
    Buffer.alloc(tweak.suites ?? 2, 0x13),
    Buffer.from([tweak.compression ?? 1]),
    Buffer.alloc(tweak.compression ?? 1, 0),
    extensions ?? Buffer.alloc(0),
  ]);
  return Buffer.concat([Buffer.from([1]), u24(body.length), body]);
}
const withExtensions = (...list: Buffer[]): Buffer => {
  const all = Buffer.concat(list);
  return Buffer.concat([u16(all.length), all]);
};

const real = await captureHello({ servername: 'api.example.com' });
const realMessage = messageOf(real);
const sniAt = realMessage.indexOf(Buffer.from('api.example.com'));

t.test('a real ClientHello, whole, byte by byte, and re-recorded at every kind of cut', async (t) => {
  t.equal(nameOf(read(real)), 'api.example.com');
  t.equal(nameOf(read(real, 1)), 'api.example.com', 'one byte at a time');
  const cuts: { name: string; cuts: number[] }[] = [
    { name: 'inside the handshake header', cuts: [2] },
    { name: 'inside the server name', cuts: [sniAt + 4] },
    { name: 'right after the server name', cuts: [sniAt + 'api.example.com'.length] },
    { name: 'three records', cuts: [40, sniAt + 3] },
    { name: 'the most records allowed, one byte each but the last', cuts: Array.from({ length: MAX_HELLO_RECORDS - 1 }, (_, i) => i + 1) },
  ];
  for (const c of cuts) {
    const bytes = records(realMessage, c.cuts);
    t.equal(nameOf(read(bytes)), 'api.example.com', `${c.name}, whole`);
    t.equal(nameOf(read(bytes, 3)), 'api.example.com', `${c.name}, in 3-byte segments`);
  }
  t.equal(nameOf(read(records(realMessage, [], 0x0303))), 'api.example.com', 'record version 1.2');
});

t.test('a hello spread over more records than any client uses is refused (and its bytes stay bounded)', async (t) => {
  const bytes = records(realMessage, Array.from({ length: MAX_HELLO_RECORDS }, (_, i) => i + 1));
  t.match(read(bytes), { kind: 'refused', reason: 'tls_hello_malformed' });
  t.match(read(bytes, 1), { kind: 'refused', reason: 'tls_hello_malformed' }, 'a byte at a time too');
});

t.test('the name a server would see is the name read, even when a record ends inside it', async (t) => {
  // The attack of the cut-off record: a first record that ends after "allowed.test." must not be
  // read as the whole name.
  const long = messageOf(await captureHello({ servername: 'allowed.test.other.test' }));
  const at = long.indexOf(Buffer.from('allowed.test.other.test')) + 'allowed.test.'.length;
  t.equal(nameOf(read(records(long, [at]))), 'allowed.test.other.test');
});

t.test('a real ClientHello without a server name', async (t) => {
  const bytes = await captureHello({ servername: '' });
  t.same(read(bytes), { kind: 'hello', serverName: undefined });
});

t.test('bytes after the ClientHello do not matter; its end decides', async (t) => {
  const result = read(Buffer.concat([real, Buffer.from([0x14, 0x03, 0x03, 0x00, 0x01, 0x01])]));
  t.equal(nameOf(result), 'api.example.com');
});

const good = withExtensions(ext(0, sniData([0, 'a.example'])));
const cases: { name: string; bytes: Buffer; want: HelloResult['kind']; reason?: string }[] = [
  { name: 'hand-built hello', bytes: records(hello(good)), want: 'hello' },
  { name: 'no extensions at all (TLS 1.2 allows it)', bytes: records(hello(undefined)), want: 'hello' },
  { name: 'plain HTTP', bytes: Buffer.from('GET / HTTP/1.1\r\n\r\n'), want: 'refused', reason: 'sni_missing' },
  { name: 'SSH banner', bytes: Buffer.from('SSH-2.0-OpenSSH_9.6\r\n'), want: 'refused', reason: 'sni_missing' },
  { name: 'SSLv2-style hello', bytes: Buffer.from([0x80, 0x2e, 0x01, 0x00, 0x02]), want: 'refused', reason: 'sni_missing' },
  { name: 'an empty handshake record first', bytes: Buffer.concat([Buffer.from([0x16, 3, 1, 0, 0]), records(hello(good))]), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'a warning alert first', bytes: Buffer.concat([Buffer.from([0x15, 3, 1, 0, 2, 1, 0]), records(hello(good))]), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'change_cipher_spec first', bytes: Buffer.concat([Buffer.from([0x14, 3, 3, 0, 1, 1]), records(hello(good))]), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'an alert between two records of the hello', bytes: Buffer.concat([records(hello(good).subarray(0, 20)), Buffer.from([0x15, 3, 1, 0, 2, 1, 0]), records(hello(good).subarray(20))]), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'record version SSL 3.0', bytes: records(hello(good), [], 0x0300), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'record version 0x0304', bytes: records(hello(good), [], 0x0304), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'record version 0x0901', bytes: records(hello(good), [], 0x0901), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'a record over 2^14 bytes', bytes: Buffer.from([0x16, 3, 1, 0x40, 0x01]), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'a ServerHello instead', bytes: records(Buffer.concat([Buffer.from([2]), hello(good).subarray(1)])), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'a hello over the size limit', bytes: records(Buffer.concat([Buffer.from([1]), u24(MAX_HELLO_BYTES + 1)])), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'another handshake message after the hello in its record', bytes: records(Buffer.concat([hello(good), Buffer.from([20, 0, 0, 0])])), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'legacy_version SSL 3.0', bytes: records(hello(good, { version: 0x0300 })), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'session id over 32 bytes', bytes: records(hello(good, { sessionId: 33 })), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'odd cipher_suites length', bytes: records(hello(good, { suites: 3 })), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'no compression method', bytes: records(hello(good, { compression: 0 })), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'extensions length one short', bytes: records(hello(Buffer.concat([u16(good.length - 3), good.subarray(2)]))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'extensions length one long', bytes: records(hello(Buffer.concat([u16(good.length - 1), good.subarray(2)]))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'an extension running past the end', bytes: records(hello(withExtensions(Buffer.concat([u16(0), u16(50), sniData([0, 'a.example'])])))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'two server_name extensions', bytes: records(hello(withExtensions(ext(0, sniData([0, 'a.example'])), ext(0, sniData([0, 'b.example']))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'two names in the list', bytes: records(hello(withExtensions(ext(0, sniData([0, 'a.example'], [0, 'b.example']))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'a name of another type first', bytes: records(hello(withExtensions(ext(0, sniData([1, 'x'], [0, 'a.example']))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'an empty name', bytes: records(hello(withExtensions(ext(0, sniData([0, '']))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'an empty server_name list', bytes: records(hello(withExtensions(ext(0, u16(0))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'an empty server_name extension', bytes: records(hello(withExtensions(ext(0, Buffer.alloc(0))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'list length past the extension', bytes: records(hello(withExtensions(ext(0, Buffer.concat([u16(40), sniData([0, 'a.example']).subarray(2)]))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'name length past the list', bytes: records(hello(withExtensions(ext(0, Buffer.concat([u16(12), Buffer.from([0]), u16(30), Buffer.from('a.example')]))))), want: 'refused', reason: 'tls_hello_malformed' },
  { name: 'a partial record header', bytes: Buffer.from([0x16, 3, 1]), want: 'incomplete' },
  { name: 'a partial hello', bytes: records(hello(good)).subarray(0, 30), want: 'incomplete' },
];
for (const c of cases) {
  t.test(c.name, async (t) => {
    for (const chunk of [c.bytes.length || 1, 1]) {
      const result = read(c.bytes, chunk);
      t.equal(result.kind, c.want, `kind, in chunks of ${chunk}`);
      if (c.reason) t.equal(result.kind === 'refused' ? result.reason : undefined, c.reason, `reason, in chunks of ${chunk}`);
    }
  });
}

t.test('closing early', async (t) => {
  const nothing = new ClientHelloReader();
  t.match(nothing.end(), { kind: 'refused', reason: 'sni_missing' }, 'nothing sent');
  const partial = new ClientHelloReader();
  partial.push(records(hello(good)).subarray(0, 30));
  t.match(partial.end(), { kind: 'refused', reason: 'tls_hello_malformed' }, 'a partial hello');
  const header = new ClientHelloReader();
  header.push(Buffer.from([0x16, 3]));
  t.match(header.end(), { kind: 'refused', reason: 'tls_hello_malformed' }, 'a partial record header');
});

t.test('any cut into records and segments gives the answer of the whole; arbitrary bytes never throw', async (t) => {
  const whole = read(real);
  fc.assert(
    fc.property(fc.uniqueArray(fc.integer({ min: 1, max: realMessage.length - 1 }), { maxLength: 6 }), fc.integer({ min: 1, max: 64 }), (cuts, chunk) => {
      const bytes = records(realMessage, [...cuts].sort((a, b) => a - b));
      t.same(read(bytes, chunk), whole);
      return true;
    }),
    { numRuns: 300, seed: 7 },
  );
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 700 }), fc.boolean(), fc.integer({ min: 1, max: 50 }), (arr, tlsHeader, chunk) => {
      const bytes = Buffer.from(arr);
      if (tlsHeader && bytes.length > 9) {
        bytes.set([0x16, 0x03, 0x01], 0);
        bytes.writeUInt16BE(bytes.length - 5, 3);
        bytes[5] = 1;
      }
      read(bytes, chunk);
      return true;
    }),
    { numRuns: 3_000, seed: 11 },
  );
  t.pass('properties held');
});
