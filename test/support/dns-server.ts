/**
 * A small authoritative DNS server for tests, on a loopback UDP port: answers A and AAAA per
 * name from a table (at once or after a delay), can change its answer between lookups
 * (rebinding), never answer (timeout) or answer NXDOMAIN, and counts the questions it gets per name.
 */
import dgram from 'node:dgram';
import ipaddr from 'ipaddr.js';

export type DnsBehaviour =
  | { readonly answers: readonly string[]; readonly delayMs?: number }
  /** The first lookup gets `first`, every later one `then` (a rebinding attacker). */
  | { readonly first: readonly string[]; readonly then: readonly string[] }
  | { readonly timeout: true }
  | { readonly nxdomain: true };

export interface TestDnsServer {
  readonly address: string; // "127.0.0.1:PORT"
  /** Sets how a name is answered, and restarts its question count. */
  set(name: string, behaviour: DnsBehaviour): void;
  /** Questions received for a name (A and AAAA count separately). */
  questions(name: string): number;
  close(): Promise<void>;
}

function readName(msg: Buffer, offset: number): { name: string; next: number } {
  const labels: string[] = [];
  let at = offset;
  for (let len = msg[at] ?? 0; len !== 0; len = msg[at] ?? 0) {
    labels.push(msg.subarray(at + 1, at + 1 + len).toString('latin1'));
    at += len + 1;
  }
  return { name: labels.join('.').toLowerCase(), next: at + 1 };
}

function answer(query: Buffer, qEnd: number, rcode: number, records: readonly Buffer[]): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  header.writeUInt16BE(0x8400 | (query.readUInt16BE(2) & 0x0100) | rcode, 2); // QR, AA, RD copied
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(records.length, 6);
  const rrs = records.map((rdata) => {
    const rr = Buffer.alloc(12);
    rr.writeUInt16BE(0xc00c, 0); // pointer to the question name
    rr.writeUInt16BE(rdata.length === 4 ? 1 : 28, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(5, 6); // TTL
    rr.writeUInt16BE(rdata.length, 10);
    return Buffer.concat([rr, rdata]);
  });
  return Buffer.concat([header, query.subarray(12, qEnd), ...rrs]);
}

/** `port`: 0 for any free one (53 inside a test's own network namespace). */
export async function startDnsServer(port = 0): Promise<TestDnsServer> {
  const table = new Map<string, DnsBehaviour>();
  const counts = new Map<string, number>();
  const socket = dgram.createSocket('udp4');
  const pending = new Set<NodeJS.Timeout>();
  socket.on('message', (msg, peer) => {
    if (msg.length < 17) return;
    const { name, next } = readName(msg, 12);
    const qtype = msg.readUInt16BE(next);
    const qEnd = next + 4;
    const seen = counts.get(name) ?? 0;
    if (qtype === 1) counts.set(name, seen + 1); // count lookups by their A question
    const behaviour = table.get(name);
    if (behaviour === undefined || 'nxdomain' in behaviour) {
      socket.send(answer(msg, qEnd, 3, []), peer.port, peer.address);
      return;
    }
    if ('timeout' in behaviour) return;
    const list = 'answers' in behaviour ? behaviour.answers : seen === 0 || qtype !== 1 && seen === 1 ? behaviour.first : behaviour.then;
    const records = list
      .map((a) => ipaddr.parse(a))
      .filter((a) => (qtype === 1 ? a.kind() === 'ipv4' : a.kind() === 'ipv6' && qtype === 28))
      .map((a) => Buffer.from(a.toByteArray()));
    const reply = answer(msg, qEnd, 0, records);
    const delay = 'delayMs' in behaviour ? (behaviour.delayMs ?? 0) : 0;
    if (delay > 0) {
      // A delayed answer still due when the server closes (to a retry the resolver sent under
      // load) is dropped: sent on the closed socket it would throw outside any test.
      const timer = setTimeout(() => {
        pending.delete(timer);
        socket.send(reply, peer.port, peer.address);
      }, delay);
      pending.add(timer);
    } else socket.send(reply, peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(port, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    set: (name, behaviour) => {
      table.set(name.toLowerCase(), behaviour);
      counts.delete(name.toLowerCase());
    },
    questions: (name) => counts.get(name.toLowerCase()) ?? 0,
    close: () => {
      for (const timer of pending) clearTimeout(timer);
      pending.clear();
      return new Promise<void>((resolve) => socket.close(() => resolve()));
    },
  };
}
