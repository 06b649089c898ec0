/**
 * Answers a hostile or broken upstream gives (upstream-fuzz.test.ts, inspect-upstream-fuzz.test.ts,
 * h1-fuzz.test.ts): status lines, fields, framing and chunking, early closes, trailing bytes,
 * second responses, huge or slow heads and bodies. Half are well-formed, so that passing on is
 * exercised too. The body is 'x' repeated; bytes after a delimited message say 'evil'. `runCases`
 * asks for each through the proxy and judges what the client got: one well-formed response, or a
 * refusal naming its reason.
 */
import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { Test } from 'tap';
import { isReason } from '../../policy/index.js';

export interface Answer {
  /** Pieces written in order, with a pause in milliseconds before each. */
  readonly pieces: { readonly bytes: Buffer; readonly pause: number }[];
  /** End (FIN), reset, or leave the connection open once written. */
  readonly finish: 'end' | 'reset' | 'open';
}

const STATUS = ['200', '200', '200', '204', '304', '404', '599', '000', '099', '100', '101', '103', '600', '999', '2000', '20', '-1', 'abc', '２00'];
const VERSION = ['HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/2', 'http/1.1', 'HTTP/1.1 ', 'HTTP/9.9', ''];
const ODD = ['\x00', '\x01', '\r', '\n', '\x7f', '\x85', '\xff', ' ', '\t', ':', '\r\n '];

export function generate(rnd: () => number): Answer {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const chance = (p: number): boolean => rnd() < p;
  const odd = (text: string): string => (chance(0.06) ? text.slice(0, Math.floor(rnd() * (text.length + 1))) + pick(ODD) + text.slice(Math.floor(rnd() * text.length)) : text);
  const eol = (): string => (chance(0.03) ? '\n' : '\r\n');

  // Half the answers are well-formed (so that passing on is exercised too), half hostile.
  const hostile = chance(0.5);
  const nasty = <T>(clean: T, bad: () => T): T => (hostile && chance(0.2) ? bad() : clean);
  const body = 'x'.repeat(chance(0.1) ? Math.floor(rnd() * 200_000) : Math.floor(rnd() * 64));
  const status = nasty(pick(['200', '200', '201', '204', '304', '404', '503', '599']), () => pick(STATUS));
  let head = `${nasty('HTTP/1.1', () => pick(VERSION))} ${status} ${odd(pick(['OK', '', 'Fine Thanks', hostile ? 'Créé' : 'Made']))}${eol()}`;
  const framing = hostile ? pick(['length', 'chunked', 'close', 'both', 'double-length', 'equal-lengths', 'none']) : pick(['length', 'chunked', 'close']);
  const length = nasty(String(body.length), () => String(pick([body.length + 5, Math.max(0, body.length - 3), -1, '1e3', `${body.length}, ${body.length}`, ''])));
  const coding = nasty('chunked', () => pick(['Chunked', 'gzip, chunked', 'chunked, gzip', 'identity', 'chunked\x00']));
  const fields: string[] = [];
  if (framing === 'length' || framing === 'both') fields.push(`Content-Length: ${length}`);
  if (framing === 'double-length') fields.push(`Content-Length: ${body.length}`, `Content-Length: ${body.length + 1}`);
  if (framing === 'equal-lengths') fields.push(`Content-Length: ${body.length}`, `content-length: ${body.length}`);
  if (framing === 'chunked' || framing === 'both') fields.push(`Transfer-Encoding: ${coding}`);
  for (let i = Math.floor(rnd() * 4); i > 0; i--) {
    fields.push(odd(pick(['X-A: b', 'Set-Cookie: a=1', 'Connection: close', 'Connection: keep-alive, X-A', 'Keep-Alive: timeout=1', 'Content-Type: text/plain', hostile ? 'X-Folded: a\r\n b' : 'X-B: c', 'Trailer: X-T', `X-Long: ${'v'.repeat(hostile && chance(0.2) ? 70_000 : 200)}`])));
  }
  head += fields.map((f) => `${f}${eol()}`).join('') + eol();

  let payload = '';
  if (framing === 'chunked' || framing === 'both') {
    for (let at = 0; at < body.length; ) {
      const size = Math.min(body.length - at, 1 + Math.floor(rnd() * 5000));
      const sizeText = nasty(size.toString(16), () => pick(['zz', '-1', 'fffffffffffffffff', ' 1', `${size.toString(16)};ext=1`]));
      payload += `${sizeText}\r\n${body.slice(at, at + size)}${nasty('\r\n', () => '')}`;
      at += size;
    }
    payload += nasty(`0\r\n${chance(0.2) ? 'X-T: 1\r\n' : ''}\r\n`, () => '');
  } else if (framing !== 'none') {
    payload = body;
  }
  // Bytes after a message that its fields delimit exactly: a second response, or garbage. (A body
  // without a length or chunking runs to the close, so what follows it is body, legitimately.)
  const delimited = (framing === 'length' && length === String(body.length)) || framing === 'equal-lengths' || (framing === 'chunked' && coding === 'chunked');
  if (chance(0.15) && delimited) payload += pick(['HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil', 'garbage\r\n\r\nevil', '\x00\xffevil']);
  const bytes = Buffer.from(head + payload, 'latin1');

  // Delivered whole, or cut into pieces with short pauses (a slow upstream), sometimes cut short.
  const pieces: { bytes: Buffer; pause: number }[] = [];
  const cut = chance(0.1) ? Math.floor(rnd() * bytes.length) : bytes.length;
  if (chance(0.7)) pieces.push({ bytes: bytes.subarray(0, cut), pause: 0 });
  else for (let at = 0; at < cut; ) {
    const n = 1 + Math.floor(rnd() * 400);
    pieces.push({ bytes: bytes.subarray(at, at + n), pause: chance(0.1) ? Math.floor(rnd() * 30) : 0 });
    at += n;
  }
  return { pieces, finish: pick(['end', 'end', 'end', 'reset', 'open']) };
}

/** The first response the client got: status and reason, or why it is not acceptable. */
function judge(out: string): { ok: boolean; why: string } {
  if (out === '') return { ok: false, why: 'nothing written: neither a response nor a refusal' };
  const headEnd = out.indexOf('\r\n\r\n');
  const head = headEnd === -1 ? out : out.slice(0, headEnd);
  const m = /^HTTP\/1\.1 ([0-9]{3}) ([\t\x20-\x7e]*)\r\n/.exec(`${head}\r\n`);
  if (m === null) return { ok: false, why: `not an HTTP/1.1 status line: ${JSON.stringify(head.slice(0, 60))}` };
  const status = Number(m[1]);
  if (status < 200 || status > 599) return { ok: false, why: `status ${status} passed on` };
  const lines = head.split('\r\n').slice(1);
  for (const line of lines) {
    if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+: ?[\t\x20-\x7e\x80-\xff]*$/.test(line)) return { ok: false, why: `bad field line ${JSON.stringify(line.slice(0, 60))}` };
  }
  // What a client's parser (Node's, undici's) refuses: two lengths, or a length beside chunked.
  const framing = lines.map((line) => line.slice(0, line.indexOf(':')).toLowerCase()).filter((name) => name === 'content-length' || name === 'transfer-encoding');
  if (framing.length > 1) return { ok: false, why: `framing fields passed on: ${framing.join(', ')}` };
  const reason = /\r\nx-egress-reason: ([a-z_]+)/i.exec(head)?.[1];
  if (reason !== undefined && (!isReason(reason) || ![502, 504].includes(status))) return { ok: false, why: `refusal ${status} ${reason}` };
  if (out.slice(headEnd + 4).includes('evil')) return { ok: false, why: 'bytes after the response were passed on' };
  if ((out.match(/\r\nHTTP\/1\.[01] \d{3} /g) ?? []).length > 0) return { ok: false, why: 'a second response' };
  return { ok: true, why: `${status}${reason ? ` ${reason}` : ''}` };
}

/** Writes `answer` to `socket` piece by piece, with its pauses, then ends, resets or leaves it open. */
export async function writeAnswer(socket: Socket, answer: Answer): Promise<void> {
  for (const piece of answer.pieces) {
    if (piece.pause > 0) await new Promise((r) => setTimeout(r, piece.pause));
    if (socket.destroyed) return;
    socket.write(piece.bytes);
  }
  if (answer.finish === 'end') socket.end();
  else if (answer.finish === 'reset') {
    // A TLS socket has no reset of its own (its handle is not TCP): it is destroyed.
    if (socket instanceof TLSSocket) socket.destroy();
    else socket.resetAndDestroy();
  }
}

/**
 * A hostile upstream's connection listener: once a request head is in, the answer registered for
 * its GET path is written (writeAnswer), and a path with none goes to `unknown`. Bytes after the
 * first head are not read.
 */
export function answering(answers: ReadonlyMap<string, Answer>, unknown: (socket: Socket, path: string) => void): (socket: Socket) => void {
  return (socket) => {
    socket.on('error', () => undefined);
    let head = '';
    socket.on('data', (d: Buffer) => {
      if (head.includes('\r\n\r\n')) return;
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      const path = /^GET (\S+)/.exec(head)?.[1] ?? '';
      const answer = answers.get(path);
      if (answer === undefined) unknown(socket, path);
      else void writeAnswer(socket, answer);
    });
  };
}

/**
 * Runs `cases` hostile answers, `parallel` at a time: each generated from `rnd`, registered in
 * `answers` under /case<i>, asked for through the proxy by `ask` (what the client got back) and
 * judged. A case the client got no acceptable answer to fails `t`, with the answer's bytes; a
 * comment counts the outcomes.
 */
export async function runCases(t: Test, run: { cases: number; parallel: number; rnd: () => number; answers: Map<string, Answer>; ask: (path: string) => Promise<string> }): Promise<void> {
  const outcomes = new Map<string, number>();
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < run.cases; i = next++) {
      const path = `/case${i}`;
      const answer = generate(run.rnd);
      run.answers.set(path, answer);
      const verdict = judge(await run.ask(path));
      if (!verdict.ok) {
        const bytes = answer.pieces.reduce((n, p) => n + p.bytes.length, 0);
        t.fail(`case ${i}: ${verdict.why}`, { finish: answer.finish, pieces: answer.pieces.length, bytes, answer: answer.pieces.map((p) => p.bytes.toString('latin1').slice(0, 300)).join('|') });
      }
      outcomes.set(verdict.why, (outcomes.get(verdict.why) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: run.parallel }, worker));
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries([...outcomes].sort((a, b) => b[1] - a[1])))}`);
}
