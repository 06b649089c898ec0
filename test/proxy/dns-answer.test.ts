/**
 * The transparent DNS answer (proxy/dns/dns-answer.ts), one rule per row: allowlisted names get the
 * proxy's address and nothing else does; every name rule of CONNECT applies; hostile messages
 * (responses, odd opcodes, counts, compression, dots inside labels, trailing bytes, classes, EDNS
 * versions) get no answer or an error answer that carries nothing; a large answer is truncated
 * over UDP and whole over TCP.
 */
import t from 'tap';
import dnsPacket from 'dns-packet';
import { answerQuery, ANSWER_TTL, MAX_QUERY_BYTES, type DnsVerdict } from '../../proxy/dns/dns-answer.js';
import { policyOf } from '../support/test-proxy.js';

const ANSWER = '10.213.0.2';
const long = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(50)}.wild.test`;
const policy = policyOf({ allowHosts: ['allowed.test', '*.wild.test'] });

type Reply = Extract<DnsVerdict, { kind: 'reply' }>;
/** The header fields dns-packet decodes that its types leave out. */
type Decoded = dnsPacket.DecodedPacket & { rcode?: string; opcode?: string };
/** Type names dns-packet writes beyond those its types list: ANY (255), and HTTPS, a name it does not know (written as type 0). */
type QueryType = dnsPacket.RecordType | 'ANY' | 'HTTPS';
const encode = dnsPacket.encode as (packet: Omit<dnsPacket.Packet, 'questions'> & { questions?: (Omit<dnsPacket.Question, 'type'> & { type: QueryType })[] }) => Buffer;

function query(name: string, type: QueryType = 'A', extra: Partial<dnsPacket.Packet> = {}): Buffer {
  return encode({ id: 0x4242, type: 'query', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type, name, class: 'IN' }], ...extra });
}

function ednsQuery(name: string, version = 0, size = 1232): Buffer {
  return query(name, 'A', { additionals: [{ type: 'OPT', name: '.', udpPayloadSize: size, extendedRcode: 0, ednsVersion: version, flags: 0, flag_do: false, options: [] }] });
}

function answered(verdict: DnsVerdict): Reply & { decoded: Decoded } {
  if (verdict.kind !== 'reply') throw new Error(`dropped: ${verdict.why}`);
  return { ...verdict, decoded: dnsPacket.decode(verdict.message) };
}

/** The bytes of a query for `labels` written by hand (what the codec would refuse to write). */
function rawQuery(nameBytes: Buffer, tail = Buffer.from([0, 1, 0, 1]), header = [0x42, 0x42, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]): Buffer {
  return Buffer.concat([Buffer.from(header), nameBytes, tail]);
}

const label = (text: string | Buffer): Buffer => {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'latin1') : text;
  return Buffer.concat([Buffer.from([bytes.length]), bytes]);
};

t.test('an allowlisted name gets one A record: the proxy\'s address, short-lived', async (t) => {
  const rows = [
    { name: 'an exact entry', ask: 'allowed.test', rule: 'allowed.test' },
    { name: 'below a wildcard, one level', ask: 'x.wild.test', rule: '*.wild.test' },
    { name: 'below a wildcard, any depth', ask: 'a.b.c.wild.test', rule: '*.wild.test' },
    { name: 'upper case and mixed (0x20 queries), echoed as asked', ask: 'AlLoWeD.TeSt', rule: 'allowed.test' },
  ];
  for (const row of rows) {
    const r = answered(answerQuery(query(row.ask), policy, ANSWER, 'udp'));
    t.equal(r.result, 'answered', row.name);
    t.equal(r.rule, row.rule, row.name);
    t.same([r.decoded.id, r.decoded.type, r.decoded.rcode, r.decoded.flag_rd, r.decoded.flag_tc], [0x4242, 'response', 'NOERROR', true, false], `${row.name}: header`);
    t.same(r.decoded.questions, [{ name: row.ask, type: 'A', class: 'IN' }], `${row.name}: the question as asked`);
    t.same(r.decoded.answers?.map((a) => [a.name, a.type, (a as dnsPacket.StringAnswer).data, (a as dnsPacket.StringAnswer).ttl]), [[row.ask, 'A', ANSWER, ANSWER_TTL]], `${row.name}: one A record`);
    t.same(r.decoded.additionals, [], `${row.name}: no EDNS in, none out`);
  }
});

t.test('other types of an allowed name: an empty answer (no AAAA: the networks are IPv4)', async (t) => {
  for (const type of ['AAAA', 'MX', 'TXT', 'CNAME', 'ANY', 'HTTPS', 'SRV', 'PTR'] as const) {
    const r = answered(answerQuery(query('allowed.test', type), policy, ANSWER, 'udp'));
    t.same([r.result, r.decoded.rcode, r.decoded.answers?.length, r.refusal], ['empty', 'NOERROR', 0, undefined], type);
  }
});

t.test('any other name: NXDOMAIN, whatever the type, with the reason', async (t) => {
  const rows = [
    { name: 'not on the list', ask: 'example.com', reason: 'dns_not_allowed' },
    { name: 'a suffix trick', ask: 'evilallowed.test', reason: 'dns_not_allowed' },
    { name: 'an allowed name below an unlisted one', ask: 'allowed.test.evil.com', reason: 'dns_not_allowed' },
    { name: 'a reverse lookup', ask: '2.0.213.10.in-addr.arpa', reason: 'dns_not_allowed' },
    { name: 'a dotted IPv4 literal', ask: '127.0.0.1', reason: 'ip_literal' },
    { name: 'a numeric literal', ask: '2130706433', reason: 'ip_literal' },
    { name: 'a hex literal', ask: '0x7f.1', reason: 'ip_literal' },
    { name: 'a short literal under an allowed name', ask: 'x.wild.test.1', reason: 'ip_literal' },
    { name: 'a label starting with "-"', ask: '-x.wild.test', reason: 'malformed_host' },
    { name: 'a space in a label', ask: 'a b.wild.test', reason: 'malformed_host' },
    { name: 'a "*" label', ask: '*.wild.test', reason: 'malformed_host' },
    { name: 'non-ASCII that maps to an allowed name', ask: 'ⓐllowed.test', reason: 'malformed_host' },
    { name: 'the root', ask: '.', reason: 'malformed_host' },
  ];
  for (const row of rows) {
    for (const type of ['A', 'AAAA', 'TXT'] as const) {
      const r = answered(answerQuery(query(row.ask, type), policy, ANSWER, 'udp'));
      t.same([r.result, r.decoded.rcode, r.decoded.answers?.length, r.refusal?.reason], ['nxdomain', 'NXDOMAIN', 0, row.reason], `${row.name} (${type})`);
    }
  }
});

// NXDOMAIN says that no name below exists either (RFC 8020): a caching resolver in the workload
// may then answer the allowed names below from its cache, NXDOMAIN too.
t.test('a name with allowed names below it: no address, and no NXDOMAIN, with the reason', async (t) => {
  const deep = policyOf({ allowHosts: ['api.github.com', '*.wild.test'] });
  for (const ask of ['github.com', 'GitHub.com', 'com', 'wild.test', 'test']) {
    for (const type of ['A', 'AAAA', 'TXT'] as const) {
      const r = answered(answerQuery(query(ask, type), deep, ANSWER, 'udp'));
      t.same([r.result, r.decoded.rcode, r.decoded.answers?.length, r.refusal?.reason], ['empty', 'NOERROR', 0, 'dns_not_allowed'], `${ask} (${type})`);
    }
  }
  for (const ask of ['x.github.com', 'hub.com', 'api.github.com.evil', 'ild.test']) {
    t.equal(answered(answerQuery(query(ask), deep, ANSWER, 'udp')).decoded.rcode, 'NXDOMAIN', `${ask}: beside or past the entries, NXDOMAIN`);
  }
  t.equal(answered(answerQuery(query('api.github.com'), deep, ANSWER, 'udp')).result, 'answered', 'the entry itself answered');
});

t.test('report mode: a name off the allowlist is answered (its connection gets the would_deny line); IP literals and malformed names still get NXDOMAIN', async (t) => {
  const report = policyOf({ allowHosts: ['allowed.test'], mode: 'report' });
  for (const ask of ['example.com', 'wild.test', 'allowed.test.evil.com']) {
    const r = answered(answerQuery(query(ask), report, ANSWER, 'udp'));
    t.same([r.result, r.rule, r.refusal, r.decoded.answers?.map((a) => (a as dnsPacket.StringAnswer).data)], ['answered', undefined, undefined, [ANSWER]], ask);
  }
  t.equal(answered(answerQuery(query('allowed.test'), report, ANSWER, 'udp')).rule, 'allowed.test', 'a listed name keeps its rule');
  for (const row of [{ ask: '127.0.0.1', reason: 'ip_literal' }, { ask: '2130706433', reason: 'ip_literal' }, { ask: '-x.test', reason: 'malformed_host' }, { ask: '.', reason: 'malformed_host' }]) {
    const r = answered(answerQuery(query(row.ask), report, ANSWER, 'udp'));
    t.same([r.result, r.refusal?.reason], ['nxdomain', row.reason], row.ask);
  }
});

t.test('a message that is no query gets nothing', async (t) => {
  const response = dnsPacket.encode({ id: 1, type: 'response', flags: 0, questions: [{ type: 'A', name: 'allowed.test', class: 'IN' }], answers: [{ type: 'A', name: 'allowed.test', data: '1.2.3.4' }] });
  const rows: { name: string; bytes: Buffer; why: string }[] = [
    { name: 'a response (QR=1): never answered, so never reflected', bytes: response, why: 'response' },
    { name: 'a response asking like a query', bytes: Buffer.from([...query('allowed.test').subarray(0, 2), 0x81, 0x00, ...query('allowed.test').subarray(4)]), why: 'response' },
    { name: 'shorter than a header', bytes: Buffer.from([0x42, 0x42, 1, 0, 0, 1, 0, 0, 0, 0, 0]), why: 'short' },
    { name: 'empty', bytes: Buffer.alloc(0), why: 'short' },
    { name: `over ${MAX_QUERY_BYTES} bytes`, bytes: Buffer.concat([query('allowed.test'), Buffer.alloc(MAX_QUERY_BYTES)]), why: 'too_large' },
  ];
  for (const row of rows) t.same(answerQuery(row.bytes, policy, ANSWER, 'udp'), { kind: 'drop', why: row.why }, row.name);
});

t.test('hostile queries get an error answer that carries no question and no record', async (t) => {
  const good = query('allowed.test');
  const withCounts = (qd: number, an: number, ns: number, ar: number): Buffer => {
    const b = Buffer.from(good);
    b.writeUInt16BE(qd, 4);
    b.writeUInt16BE(an, 6);
    b.writeUInt16BE(ns, 8);
    b.writeUInt16BE(ar, 10);
    return b;
  };
  const twoQuestions = dnsPacket.encode({ id: 1, type: 'query', questions: [{ type: 'A', name: 'allowed.test' }, { type: 'A', name: 'x.wild.test' }] });
  const rows: { name: string; bytes: Buffer; result: string; rcode: string }[] = [
    { name: 'opcode IQUERY', bytes: Buffer.from([0x42, 0x42, 0x09, 0x00, ...good.subarray(4)]), result: 'notimp', rcode: 'NOTIMP' },
    { name: 'opcode STATUS', bytes: Buffer.from([0x42, 0x42, 0x11, 0x00, ...good.subarray(4)]), result: 'notimp', rcode: 'NOTIMP' },
    { name: 'opcode NOTIFY', bytes: Buffer.from([0x42, 0x42, 0x21, 0x00, ...good.subarray(4)]), result: 'notimp', rcode: 'NOTIMP' },
    { name: 'opcode UPDATE', bytes: Buffer.from([0x42, 0x42, 0x29, 0x00, ...good.subarray(4)]), result: 'notimp', rcode: 'NOTIMP' },
    { name: 'no question', bytes: withCounts(0, 0, 0, 0), result: 'formerr', rcode: 'FORMERR' },
    { name: 'two questions', bytes: twoQuestions, result: 'formerr', rcode: 'FORMERR' },
    { name: '65535 questions', bytes: withCounts(65535, 0, 0, 0), result: 'formerr', rcode: 'FORMERR' },
    { name: 'an answer section', bytes: withCounts(1, 1, 0, 0), result: 'formerr', rcode: 'FORMERR' },
    { name: 'an authority section', bytes: withCounts(1, 0, 1, 0), result: 'formerr', rcode: 'FORMERR' },
    { name: 'two additional records', bytes: withCounts(1, 0, 0, 2), result: 'formerr', rcode: 'FORMERR' },
    { name: 'an additional record that is not OPT', bytes: query('allowed.test', 'A', { additionals: [{ type: 'A', name: 'x.test', data: '1.2.3.4' }] }), result: 'formerr', rcode: 'FORMERR' },
    { name: 'counts that promise more than there is', bytes: withCounts(1, 0, 0, 1), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a byte after the message', bytes: Buffer.concat([good, Buffer.from([0])]), result: 'formerr', rcode: 'FORMERR' },
    { name: 'the question cut short', bytes: good.subarray(0, good.length - 2), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a dot inside a label ("allowed.test" as one label)', bytes: rawQuery(Buffer.concat([label('allowed.test'), Buffer.from([0])])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a compressed question name (a pointer into the header)', bytes: rawQuery(Buffer.from([0xc0, 0x00])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a pointer to itself (a loop)', bytes: rawQuery(Buffer.from([0xc0, 0x0c])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'labels then a pointer to their start (a loop)', bytes: rawQuery(Buffer.concat([label('a'), Buffer.from([0xc0, 0x0c])])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a label of the reserved 0x40 type', bytes: rawQuery(Buffer.from([0x41, 0x61, 0])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a name over 255 bytes', bytes: rawQuery(Buffer.concat([...Array.from({ length: 5 }, () => label('x'.repeat(60))), Buffer.from([0])])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'invalid UTF-8 in a label', bytes: rawQuery(Buffer.concat([label(Buffer.from([0xff, 0x61])), label('wild'), label('test'), Buffer.from([0])])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'a NUL byte in a label', bytes: rawQuery(Buffer.concat([label(Buffer.from([0x61, 0x00])), label('wild'), label('test'), Buffer.from([0])])), result: 'nxdomain', rcode: 'NXDOMAIN' },
    { name: 'an unknown class (the mDNS unicast bit)', bytes: rawQuery(Buffer.concat([label('allowed'), label('test'), Buffer.from([0])]), Buffer.from([0, 1, 0x80, 1])), result: 'formerr', rcode: 'FORMERR' },
    { name: 'class CHAOS (version.bind)', bytes: query('allowed.test', 'TXT', { questions: [{ type: 'TXT', name: 'version.bind', class: 'CH' }] }), result: 'refused', rcode: 'REFUSED' },
    { name: 'class ANY', bytes: query('allowed.test', 'A', { questions: [{ type: 'A', name: 'allowed.test', class: 'ANY' }] }), result: 'refused', rcode: 'REFUSED' },
  ];
  for (const row of rows) {
    const r = answered(answerQuery(row.bytes, policy, ANSWER, 'udp'));
    t.same([r.result, r.decoded.rcode, r.decoded.answers?.length, r.decoded.questions?.length], [row.result, row.rcode, 0, row.result === 'nxdomain' ? 1 : 0], row.name);
    t.equal(r.decoded.id, row.bytes.readUInt16BE(0), `${row.name}: the query's id`);
    t.ok(r.message.length <= row.bytes.length || row.result === 'nxdomain', `${row.name}: no larger than the query`);
  }
  const notimp = answered(answerQuery(Buffer.from([0x42, 0x42, 0x29, 0x00, ...good.subarray(4)]), policy, ANSWER, 'udp'));
  t.equal(notimp.decoded.opcode, 'UPDATE', 'NOTIMP copies the opcode');
});

t.test('EDNS: an OPT record in gets ours out; another version gets BADVERS', async (t) => {
  const r = answered(answerQuery(ednsQuery('allowed.test'), policy, ANSWER, 'udp'));
  t.equal(r.result, 'answered');
  const opt = r.decoded.additionals?.[0] as dnsPacket.OptAnswer;
  t.same([opt?.type, opt?.udpPayloadSize, opt?.ednsVersion, opt?.extendedRcode], ['OPT', 1232, 0, 0]);
  const refused = answered(answerQuery(query('example.com', 'A', { additionals: [{ type: 'OPT', name: '.', udpPayloadSize: 4096, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }] }), policy, ANSWER, 'udp'));
  t.same([refused.decoded.rcode, refused.decoded.additionals?.length], ['NXDOMAIN', 1], 'an NXDOMAIN keeps EDNS');
  const badvers = answered(answerQuery(ednsQuery('allowed.test', 1), policy, ANSWER, 'udp'));
  const badOpt = badvers.decoded.additionals?.[0] as dnsPacket.OptAnswer;
  t.same([badvers.result, badvers.decoded.rcode, badvers.decoded.answers?.length, badOpt?.extendedRcode, badOpt?.ednsVersion], ['badvers', 'NOERROR', 0, 1, 0], 'BADVERS (16): extended RCODE 1, header RCODE 0');
  const notRoot = Buffer.from(ednsQuery('allowed.test'));
  // The OPT record's owner name is its first byte after the question: make it a label.
  const at = 12 + 'allowed.test'.length + 2 + 4;
  const renamed = Buffer.concat([notRoot.subarray(0, at), Buffer.from([1, 0x78]), notRoot.subarray(at)]);
  t.equal(answered(answerQuery(renamed, policy, ANSWER, 'udp')).result, 'formerr', 'an OPT record not owned by the root');
});

t.test('a large answer is truncated over UDP (TC, the question only) and whole over TCP', async (t) => {
  t.ok(query(long).length < 512 && long.length > 240, 'the query fits; its answer does not fit in 512 bytes');
  const udp = answered(answerQuery(query(long), policy, ANSWER, 'udp'));
  t.same([udp.result, udp.truncated, udp.decoded.flag_tc, udp.decoded.answers?.length, udp.decoded.questions?.[0]?.name], ['answered', true, true, 0, long]);
  t.ok(udp.message.length <= 512);
  const tcp = answered(answerQuery(query(long), policy, ANSWER, 'tcp'));
  t.same([tcp.truncated, tcp.decoded.flag_tc, tcp.decoded.answers?.length], [false, false, 1]);
  const edns = answered(answerQuery(ednsQuery(long), policy, ANSWER, 'udp'));
  t.same([edns.truncated, edns.decoded.answers?.length], [false, 1], 'EDNS with room for it: whole over UDP');
  const small = answered(answerQuery(ednsQuery(long, 0, 100), policy, ANSWER, 'udp'));
  t.same([small.truncated, small.decoded.answers?.length], [true, 0], 'EDNS advertising less than 512 counts as 512');
});

t.test('the policy in force decides: a reload applies to the next query', async (t) => {
  const before = answered(answerQuery(query('new.test'), policy, ANSWER, 'udp'));
  const after = answered(answerQuery(query('new.test'), policyOf({ allowHosts: ['new.test'] }), ANSWER, 'udp'));
  t.same([before.decoded.rcode, after.decoded.rcode, after.decoded.answers?.length], ['NXDOMAIN', 'NOERROR', 1]);
});
