/**
 * The DNS answer of transparent mode for one query message, as a value. Pure: the responder
 * (dns-responder.ts) owns the sockets, the rate limits and the log; this decides what one message
 * gets. Messages are read and written with `dns-packet`, a maintained codec; what it lets through
 * that a stub resolver never sends is refused here.
 *
 * An allowlisted name (the CONNECT matcher, after the CONNECT host-name rules) gets one A record:
 * the proxy's own address on the workload's network, for a few seconds. Any other name gets
 * NXDOMAIN, every query type alike, but for one with allowed names below it, which gets an empty
 * answer; so do other types of an allowed name (the networks are IPv4, so no AAAA). Nothing is
 * ever asked of another resolver: the answer depends on the name and the allowlist alone, so a
 * query carries no data out of the workload.
 *
 * Hostile input: a message that is a response (QR=1) is never answered (two responders would
 * bounce it between them; a spoofed source would make this one a reflector), nor one too short
 * or too long to be a query. Anything but one plain question, optionally with one EDNS OPT
 * record, is FORMERR, and the error answers carry no question, so no answer is larger than its
 * query except an allowed name's (at most twice: the answer repeats the name).
 */
import type * as DnsPacket from 'dns-packet';
import { requireCjs } from '../../common/index.js';
import { parseHostName, type Policy, type Reason } from '../../policy/index.js';

// Loaded on the first DNS message: a proxy without transparent mode never pays for the codec.
let codec: typeof DnsPacket | undefined;
const packets = (): typeof DnsPacket => (codec ??= requireCjs('dns-packet') as typeof DnsPacket);

/** Largest query read (bytes of the message, without TCP's length prefix). A stub's query with the longest name and an EDNS cookie is under 350. */
export const MAX_QUERY_BYTES = 512;
/** Seconds an answer may be kept: a policy reload reaches clients that soon. */
export const ANSWER_TTL = 5;
/** Largest UDP answer sent to a client that advertises more with EDNS (RFC 9715's 1232: no fragments). */
const MAX_UDP_ANSWER = 1232;
/** Without EDNS a UDP answer is at most 512 bytes (RFC 1035 §4.2.1); beyond, TC and the client retries over TCP. */
const PLAIN_UDP_ANSWER = 512;

const HEADER = 12;
const QR = 0x8000;
const TC = 0x0200;
const RD = 0x0100;
const RA = 0x0080;
const RCODE = { NOERROR: 0, FORMERR: 1, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
/** BADVERS is 16: the upper bits go in the OPT record's extended RCODE (RFC 6891 §6.1.3). */
const BADVERS_EXTENDED = 1;

/** What a query got, for the metric. */
export type DnsResult = 'answered' | 'empty' | 'nxdomain' | 'refused' | 'formerr' | 'notimp' | 'badvers';

export type DnsVerdict =
  /** No answer at all: a response, or no query by its size. */
  | { readonly kind: 'drop'; readonly why: 'response' | 'short' | 'too_large' }
  | {
      readonly kind: 'reply';
      readonly result: DnsResult;
      readonly message: Buffer;
      /** The answer did not fit in UDP: sent with TC and its question only. */
      readonly truncated: boolean;
      /** The name asked, as sent (for the decision line), when the message had one question. */
      readonly name?: string;
      readonly qtype?: string;
      /** Why a name got NXDOMAIN (or no address): it is off the allowlist, or not a host name at all. */
      readonly refusal?: { readonly reason: Extract<Reason, 'dns_not_allowed' | 'ip_literal' | 'malformed_host' | 'unknown_client'>; readonly detail: string };
      /** The allowlist entry that matched an answered name. */
      readonly rule?: string;
    };

type Question = DnsPacket.Question;
type Opt = Extract<DnsPacket.Answer, { type: 'OPT' }>;

/** A header-only answer (id, opcode and RD of the query), for messages whose question is not taken. */
function bare(query: Buffer, rcode: number, opt: boolean): Buffer {
  const flags = (query.readUInt16BE(2) & (0x7800 | RD)) | RA | rcode;
  return packets().encode({ id: query.readUInt16BE(0), type: 'response', flags, questions: [], additionals: opt ? [ourOpt(0)] : [] });
}

function ourOpt(extendedRcode: number): Opt {
  return { type: 'OPT', name: '.', udpPayloadSize: MAX_UDP_ANSWER, extendedRcode, ednsVersion: 0, flags: 0, flag_do: false, options: [] };
}

function reply(result: DnsResult, message: Buffer, extra: Partial<Extract<DnsVerdict, { kind: 'reply' }>> = {}): DnsVerdict {
  return { kind: 'reply', result, message, truncated: false, ...extra };
}

/**
 * The answer to one DNS message from a workload. `answer` is the IPv4 address an allowed name
 * resolves to; `transport` decides whether a large answer is truncated (UDP) or sent whole (TCP).
 * No policy: a client the proxy does not serve (a shared proxy's unknown client), REFUSED.
 */
export function answerQuery(query: Buffer, policy: Policy | undefined, answer: string, transport: 'udp' | 'tcp'): DnsVerdict {
  if (query.length < HEADER) return { kind: 'drop', why: 'short' };
  if (query.length > MAX_QUERY_BYTES) return { kind: 'drop', why: 'too_large' };
  const flags = query.readUInt16BE(2);
  if ((flags & QR) !== 0) return { kind: 'drop', why: 'response' };
  // Only QUERY (opcode 0): IQUERY, STATUS, NOTIFY and UPDATE are not served (RFC 1035 §4.1.1).
  if ((flags & 0x7800) !== 0) return reply('notimp', bare(query, RCODE.NOTIMP, false));
  // One question and nothing else but one EDNS OPT record, read from the header before any
  // section is decoded: a stub never sends more, and counts of 65535 would be arrays to fill.
  const [qd, an, ns, ar] = [query.readUInt16BE(4), query.readUInt16BE(6), query.readUInt16BE(8), query.readUInt16BE(10)];
  if (qd !== 1 || an !== 0 || ns !== 0 || ar > 1) return reply('formerr', bare(query, RCODE.FORMERR, false));

  const dnsPacket = packets();
  let decoded: DnsPacket.Packet;
  try {
    decoded = dnsPacket.decode(query);
  } catch {
    return reply('formerr', bare(query, RCODE.FORMERR, false));
  }
  const question = decoded.questions?.[0];
  const additional = decoded.additionals?.[0];
  // Bytes after the last record are not part of any message.
  if (question === undefined || dnsPacket.decode.bytes !== query.length) return reply('formerr', bare(query, RCODE.FORMERR, false));
  if (!isPlainName(query, question)) return reply('formerr', bare(query, RCODE.FORMERR, false));
  let opt: Opt | undefined;
  if (additional !== undefined) {
    if (additional.type !== 'OPT' || additional.name !== '.') return reply('formerr', bare(query, RCODE.FORMERR, false));
    opt = additional as Opt;
  }
  const edns = opt !== undefined;
  const base = { name: question.name, qtype: question.type };
  if (opt !== undefined && opt.ednsVersion !== 0) {
    return reply('badvers', respond(query, question, [], RCODE.NOERROR, BADVERS_EXTENDED, edns), base);
  }
  // Only the Internet class: CHAOS (version.bind) and the rest are not this responder's.
  if (question.class !== 'IN') return reply('refused', bare(query, RCODE.REFUSED, edns), base);
  if (policy === undefined) {
    return reply('refused', bare(query, RCODE.REFUSED, edns), { ...base, refusal: { reason: 'unknown_client', detail: 'no registered sandbox network holds this client' } });
  }

  const parsed = parseHostName(question.name === '.' ? '' : question.name);
  if (!parsed.ok) {
    return reply('nxdomain', respond(query, question, [], RCODE.NXDOMAIN, 0, edns), { ...base, refusal: { reason: parsed.reason, detail: parsed.detail } });
  }
  const pattern = policy.allowlist.match(parsed.name);
  // Report mode answers every name: the connection that follows gets the decision (would_deny).
  if (pattern === undefined && policy.mode !== 'report') {
    const refusal = { reason: 'dns_not_allowed' as const, detail: `${parsed.name} is not on the allowlist` };
    // A name with allowed names below it gets no address, and no NXDOMAIN either: that says no
    // name below it exists (RFC 8020), which a caching resolver in the workload may apply to the
    // allowed names too.
    if (policy.allowlist.hasNamesBelow(parsed.name)) return reply('empty', respond(query, question, [], RCODE.NOERROR, 0, edns), { ...base, refusal });
    return reply('nxdomain', respond(query, question, [], RCODE.NXDOMAIN, 0, edns), { ...base, refusal });
  }
  const rule = pattern?.entry;
  if (question.type !== 'A') return reply('empty', respond(query, question, [], RCODE.NOERROR, 0, edns), { ...base, rule });
  const records: DnsPacket.Answer[] = [{ type: 'A', name: question.name, class: 'IN', ttl: ANSWER_TTL, data: answer }];
  const message = respond(query, question, records, RCODE.NOERROR, 0, edns);
  const limit = edns ? Math.min(Math.max(opt?.udpPayloadSize ?? 0, PLAIN_UDP_ANSWER), MAX_UDP_ANSWER) : PLAIN_UDP_ANSWER;
  if (transport === 'udp' && message.length > limit) {
    return { kind: 'reply', result: 'answered', message: respond(query, question, [], RCODE.NOERROR, 0, edns, TC), truncated: true, ...base, rule };
  }
  return reply('answered', message, { ...base, rule });
}

/**
 * Whether the question is written exactly as the codec writes back what it read: its name as
 * plain labels, with no compression pointer (a query's only question has nothing before it to
 * point to but the header), no dot inside a label (read back as two labels), no byte the codec
 * reads as something else (invalid UTF-8 becomes U+FFFD); a type and class it knows or keeps as a
 * number. Any other question is refused rather than interpreted.
 */
function isPlainName(query: Buffer, question: Question): boolean {
  const written = packets().encode({ type: 'query', questions: [question] }).subarray(HEADER);
  return query.subarray(HEADER, HEADER + written.length).equals(written);
}

function respond(query: Buffer, question: Question, answers: DnsPacket.Answer[], rcode: number, extendedRcode: number, edns: boolean, extraFlags = 0): Buffer {
  const flags = (query.readUInt16BE(2) & RD) | RA | rcode | extraFlags;
  return packets().encode({
    id: query.readUInt16BE(0),
    type: 'response',
    flags,
    questions: [question],
    answers,
    additionals: edns ? [ourOpt(extendedRcode)] : [],
  });
}
