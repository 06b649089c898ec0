/**
 * Fuzzing the transparent DNS responder: 100,000 seeded messages (valid queries mutated bit by
 * bit, hand-made hostile names and compression pointers, raw bytes), each checked against an
 * independent reference: nothing throws; a response (QR=1) is never answered; every answer is a
 * well-formed response with the query's id; an A record is given only for a question that the
 * reference reads, byte by byte, as one plain question of type A, class IN, for an allowlisted
 * name, and it is the proxy's address; an answer without records is never larger than its query.
 * Then thousands of them over a real UDP socket: no answer to any response, and the responder
 * still answers afterwards.
 */
import dgram from 'node:dgram';
import t from 'tap';
import dnsPacket from 'dns-packet';
import { answerQuery } from '../../proxy/dns/dns-answer.js';
import { startDnsResponder } from '../../proxy/dns/dns-responder.js';
import { createLogger } from '../../proxy/record/log.js';
import { createProxyMetrics } from '../../proxy/record/metrics.js';
import { prng } from '../support/prng.js';
import { settle } from '../support/settle.js';
import { policyOf } from '../support/test-proxy.js';

const ANSWER = '10.213.0.2';
const policy = policyOf({ allowHosts: ['allowed.test', '*.wild.test'] });
const COUNT = 100_000;

/** The reference: is this the name of an allowed host, read from its raw labels (no pointers, plain bytes)? */
function referenceAllowed(query: Buffer): boolean {
  if (query.length < 12 || query.readUInt16BE(4) !== 1 || query.readUInt16BE(6) !== 0 || query.readUInt16BE(8) !== 0) return false;
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    const len = query[at];
    if (len === undefined || len > 63) return false;
    at += 1;
    if (len === 0) break;
    const label = query.subarray(at, at + len);
    if (label.length !== len || !/^[A-Za-z0-9_-]+$/.test(label.toString('latin1'))) return false;
    if (label[0] === 0x2d || label[len - 1] === 0x2d) return false;
    labels.push(label.toString('latin1').toLowerCase());
    at += len;
  }
  if (query.length < at + 4 || query.readUInt16BE(at) !== 1 || query.readUInt16BE(at + 2) !== 1) return false;
  const last = labels[labels.length - 1] ?? '';
  if (/^[0-9]+$/.test(last) || /^0x[0-9a-f]*$/.test(last)) return false;
  const name = labels.join('.');
  return name === 'allowed.test' || (name.endsWith('.wild.test') && labels.length > 2);
}

const NAMES = ['allowed.test', 'ALLOWED.test', 'x.wild.test', 'a.b.wild.test', 'wild.test', 'example.com', 'allowed.test.evil', '1.2.3.4', 'x.wild.test.1', 'evilallowed.test', '_dmarc.wild.test', '-x.wild.test'];
/** Type names dns-packet writes beyond those its types list: ANY (255), and HTTPS, a name it does not know (written as type 0). */
type QueryType = dnsPacket.RecordType | 'ANY' | 'HTTPS';
const encode = dnsPacket.encode as (packet: Omit<dnsPacket.Packet, 'questions'> & { questions?: (Omit<dnsPacket.Question, 'type'> & { type: QueryType })[] }) => Buffer;
const TYPES: QueryType[] = ['A', 'AAAA', 'TXT', 'MX', 'ANY', 'CNAME', 'PTR', 'HTTPS'];

function generate(random: () => number): Buffer {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!;
  const kind = random();
  if (kind < 0.1) return Buffer.from(Array.from({ length: Math.floor(random() * 80) }, () => Math.floor(random() * 256)));
  let bytes: Buffer;
  if (kind < 0.25) {
    // Hand-made names: label bytes from a hostile alphabet, and pointers.
    const parts: number[] = [];
    const labels = 1 + Math.floor(random() * 4);
    for (let i = 0; i < labels; i++) {
      if (random() < 0.1) {
        parts.push(0xc0, Math.floor(random() * 40));
        break;
      }
      const len = random() < 0.05 ? 64 + Math.floor(random() * 10) : 1 + Math.floor(random() * 12);
      parts.push(len, ...Array.from({ length: len }, () => pick([0x61, 0x41, 0x2e, 0x00, 0xff, 0x2d, 0x5f, 0x30, 0x20, 0x2a, 0xe2])));
    }
    if (random() < 0.5) parts.push(4, 0x77, 0x69, 0x6c, 0x64, 4, 0x74, 0x65, 0x73, 0x74);
    parts.push(0);
    bytes = Buffer.from([Math.floor(random() * 256), Math.floor(random() * 256), random() < 0.2 ? 0x81 : 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, ...parts, 0, random() < 0.8 ? 1 : 28, 0, random() < 0.9 ? 1 : 3]);
  } else {
    const edns = random() < 0.3;
    bytes = encode({
      id: Math.floor(random() * 65536),
      type: random() < 0.1 ? 'response' : 'query',
      flags: random() < 0.8 ? dnsPacket.RECURSION_DESIRED : Math.floor(random() * 0x7fff),
      questions: [{ type: random() < 0.5 ? 'A' : pick(TYPES), name: pick(NAMES), class: random() < 0.95 ? 'IN' : 'CH' }],
      additionals: edns ? [{ type: 'OPT', name: '.', udpPayloadSize: Math.floor(random() * 5000), extendedRcode: 0, ednsVersion: random() < 0.9 ? 0 : 1, flags: 0, flag_do: false, options: [] }] : [],
    });
  }
  // Mutations: bit flips, byte sets, cuts, extra bytes, other counts.
  const mutations = Math.floor(random() * 4);
  for (let i = 0; i < mutations; i++) {
    const m = random();
    if (m < 0.4 && bytes.length > 0) bytes[Math.floor(random() * bytes.length)]! ^= 1 << Math.floor(random() * 8);
    else if (m < 0.6 && bytes.length > 0) bytes[Math.floor(random() * bytes.length)] = Math.floor(random() * 256);
    else if (m < 0.75) bytes = bytes.subarray(0, Math.floor(random() * bytes.length));
    else if (m < 0.9) bytes = Buffer.concat([bytes, Buffer.from(Array.from({ length: 1 + Math.floor(random() * 8) }, () => Math.floor(random() * 256)))]);
    else if (bytes.length >= 12) bytes.writeUInt16BE(Math.floor(random() * 4), 4 + 2 * Math.floor(random() * 4));
  }
  return bytes;
}

t.test(`${COUNT.toLocaleString('en-US')} generated messages against the reference`, async (t) => {
  const random = prng(0x20dead);
  const counts = { dropped: 0, answered: 0, refusedWithNoRecord: 0, responses: 0 };
  const failures: string[] = [];
  for (let i = 0; i < COUNT && failures.length < 5; i++) {
    const query = generate(random);
    const transport = random() < 0.8 ? 'udp' : 'tcp';
    const hex = query.toString('hex');
    let verdict;
    try {
      verdict = answerQuery(Buffer.from(query), policy, ANSWER, transport);
    } catch (err) {
      failures.push(`${hex}: threw ${(err as Error).message}`);
      continue;
    }
    const isResponse = query.length >= 3 && (query[2]! & 0x80) !== 0;
    if (isResponse) counts.responses++;
    if (verdict.kind === 'drop') {
      counts.dropped++;
      continue;
    }
    if (isResponse) failures.push(`${hex}: a response was answered`);
    let reply: dnsPacket.DecodedPacket;
    try {
      reply = dnsPacket.decode(verdict.message);
    } catch (err) {
      failures.push(`${hex}: the answer does not decode (${(err as Error).message})`);
      continue;
    }
    if (reply.type !== 'response' || reply.id !== query.readUInt16BE(0)) failures.push(`${hex}: not a response with the query's id`);
    const records = reply.answers ?? [];
    if (records.length === 0) {
      counts.refusedWithNoRecord++;
      if (verdict.message.length > query.length) failures.push(`${hex}: an answer without records larger than its query`);
      continue;
    }
    counts.answered++;
    const a = records[0] as dnsPacket.StringAnswer;
    if (records.length !== 1 || a.type !== 'A' || a.data !== ANSWER) failures.push(`${hex}: an answer other than one A record with the proxy's address`);
    if (!referenceAllowed(query)) failures.push(`${hex}: an A record for a question the reference does not allow`);
    if (transport === 'udp' && verdict.message.length > 1232) failures.push(`${hex}: a UDP answer over 1232 bytes`);
  }
  t.same(failures, [], 'every message within the rules');
  t.comment(JSON.stringify(counts));
  t.ok(counts.answered > 1_000 && counts.refusedWithNoRecord > 10_000 && counts.dropped > 1_000 && counts.responses > 1_000, 'the generator reaches every outcome');
});

t.test('over a real UDP socket: responses get nothing, and the responder still answers after the flood', async (t) => {
  const metrics = createProxyMetrics(() => 0);
  const responder = await startDnsResponder('127.0.0.1', 0, {
    policy: () => policy,
    answer: ANSWER,
    observer: metrics.observer,
    log: createLogger('silent'),
    limits: { clientQueryBurst: 1e9, clientQueriesPerSecond: 1e9, networkQueryBurst: 1e9, networkQueriesPerSecond: 1e9, totalQueryBurst: 1e9, totalQueriesPerSecond: 1e9 },
  });
  t.teardown(() => responder.close());
  const socket = dgram.createSocket('udp4');
  const replies: Buffer[] = [];
  socket.on('message', (msg) => replies.push(msg));
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
  t.teardown(() => socket.close());
  const random = prng(0x5eed);
  // Sent in batches that the socket's receive buffer holds, each read before the next is sent
  // (every message read is counted by the metric): a datagram lost in the kernel proves nothing.
  let sentTotal = 0;
  const processed = async (): Promise<number> => ((await metrics.registry.getSingleMetric('egress_dns_queries_total')?.get())?.values ?? []).reduce((n, v) => n + v.value, 0);
  const send = async (bytes: Buffer): Promise<void> => {
    await new Promise<void>((r) => socket.send(bytes, responder.port, '127.0.0.1', () => r()));
    sentTotal++;
    if (sentTotal % 100 === 0) {
      let seen = 0;
      const deadline = Date.now() + 5_000;
      while ((seen = await processed()) < sentTotal && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      if (seen < sentTotal) throw new Error(`${sentTotal - seen} messages never reached the responder`);
    }
  };

  // Responses only (the QR bit set on generated messages): no answer may come back.
  for (let i = 0; i < 5_000; i++) {
    const bytes = generate(random);
    if (bytes.length < 3) continue;
    bytes[2]! |= 0x80;
    await send(bytes);
  }
  const good = dnsPacket.encode({ id: 4242, type: 'query', questions: [{ type: 'A', name: 'allowed.test' }] });
  await send(good);
  await settle(() => replies.length > 0, 'the good query answered');
  t.same(replies.map((r) => dnsPacket.decode(r).id), [4242], 'only the query was answered, none of the 5,000 responses');

  replies.length = 0;
  let sent = 0;
  for (let i = 0; i < 5_000; i++) {
    const bytes = generate(random);
    if (bytes.length >= 3 && (bytes[2]! & 0x80) !== 0) continue;
    await send(bytes);
    sent++;
  }
  await send(good);
  await settle(() => replies.some((r) => r.readUInt16BE(0) === 4242 && dnsPacket.decode(r).answers?.length === 1), 'the good query answered after the flood');
  t.ok(replies.length <= sent + 1, `${replies.length} answers to ${sent} messages`);
  const broken = replies.filter((r) => {
    try {
      return dnsPacket.decode(r).type !== 'response';
    } catch {
      return true;
    }
  });
  t.equal(broken.length, 0, 'every answer decodes as a response');
});
