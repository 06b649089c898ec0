/**
 * The tls tunnel's guard on its own, with real ClientHellos from OpenSSL (Node's TLS client) and
 * hand-made server answers: the first hello, the wait for the server's first message, and the
 * second hello a TLS 1.3 HelloRetryRequest asks for, which must name the same host.
 */
import t from 'tap';
import { MAX_HELLO_BYTES, MAX_WATCH_BYTES, TlsGuard, type GuardStep } from '../../proxy/index.js';
import { captureHello } from '../support/tls-hello.js';

/** A server's first handshake record holding a ServerHello with the given random (only the start matters). */
function serverHello(random: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from([3, 3]), random, Buffer.from([0])]);
  const message = Buffer.concat([Buffer.from([2, 0, 0, body.length]), body]);
  return Buffer.concat([Buffer.from([22, 3, 3, 0, message.length]), message]);
}
const HRR = serverHello(Buffer.from('cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c', 'hex'));
const NORMAL = serverHello(Buffer.alloc(32, 7));
const CCS = Buffer.from([20, 3, 3, 0, 1, 1]);
const EARLY_DATA = Buffer.from([23, 3, 3, 0, 3, 1, 2, 3]);

const hello = await captureHello({ servername: 'allowed.test' });
const other = await captureHello({ servername: 'other.test' });

const sent = (steps: GuardStep[]): Buffer => Buffer.concat(steps.flatMap((s) => [...s.forward]));
const verdicts = (steps: GuardStep[]) => steps.flatMap((s) => (s.verdict ? [s.verdict] : []));

t.test('no retry: the hello goes at once, what follows waits for the server, then all flows', async (t) => {
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(Buffer.concat([hello, EARLY_DATA]))];
  t.same(sent(steps), hello, 'only the hello itself before the server answers');
  t.ok(g.inspecting);
  steps.push(g.fromServer(NORMAL));
  t.same(sent(steps), Buffer.concat([hello, EARLY_DATA]), 'the early data after the server answered');
  t.same(verdicts(steps), [{ kind: 'allow' }]);
  t.notOk(g.inspecting, 'open');
  t.same(g.fromClient(Buffer.from('x')).forward, [Buffer.from('x')]);
});

t.test('a retry request, and the second hello naming the same host: allowed', async (t) => {
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(hello), g.fromServer(HRR)];
  t.equal(g.awaitingHello, true, 'a second hello is due');
  steps.push(g.fromClient(CCS));
  t.same(sent(steps), Buffer.concat([hello, CCS]), 'change_cipher_spec passes');
  steps.push(g.fromClient(hello.subarray(0, 50)));
  t.same(sent(steps), Buffer.concat([hello, CCS]), 'the second hello is held until complete');
  steps.push(g.fromClient(Buffer.concat([hello.subarray(50), EARLY_DATA])));
  t.same(sent(steps), Buffer.concat([hello, CCS, hello, EARLY_DATA]));
  t.same(verdicts(steps), [{ kind: 'allow' }]);
});

t.test('a retry request, and the second hello naming another host: refused, nothing of it sent', async (t) => {
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(hello), g.fromServer(HRR), g.fromClient(Buffer.concat([CCS, other]))];
  t.same(sent(steps), hello, 'nothing after the first hello (the refusal drops the rest of its chunk)');
  t.match(verdicts(steps), [{ kind: 'deny', reason: 'sni_mismatch', detail: /second ClientHello/ }]);
});

t.test('a second hello sent ahead, before the server asked for a retry, is checked when it does', async (t) => {
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(Buffer.concat([hello, other]))];
  t.same(sent(steps), hello, 'held, not sent');
  steps.push(g.fromServer(HRR.subarray(0, 20)), g.fromServer(HRR.subarray(20)));
  t.same(sent(steps), hello);
  t.match(verdicts(steps), [{ kind: 'deny', reason: 'sni_mismatch' }]);
});

t.test('the server answering in several pieces: nothing of it reaches the client before its first record is judged', async (t) => {
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(hello.subarray(0, 30)), g.fromClient(hello.subarray(30))];
  const first = g.fromServer(NORMAL.subarray(0, 3));
  t.same(first.deliver ?? [], [], 'three bytes of a record header are not judged yet: held');
  t.equal(g.serverJudged, false);
  const rest = g.fromServer(NORMAL.subarray(3));
  t.same(Buffer.concat([...(rest.deliver ?? [])]), NORMAL, 'then all of it, in order');
  t.equal(g.serverJudged, true);
  steps.push(first, rest);
  t.same(sent(steps), hello);
  t.same(verdicts(steps), [{ kind: 'allow' }]);
});

// Each of these once opened the tunnel: any first server byte that was not a handshake record
// counted as "no retry", and server bytes before the client's hello were taken as the answer.
t.test('a server that is not TLS is refused, and nothing held on either side passes', async (t) => {
  const cases: { name: string; before?: Buffer; after?: Buffer; detail: RegExp }[] = [
    { name: 'a banner before the client\'s hello (SMTP speaks first)', before: Buffer.from('220 mail.allowed.test ESMTP\r\n'), detail: /spoke before/ },
    { name: 'one byte before the hello is complete', before: Buffer.from([0x16]), detail: /spoke before/ },
    { name: 'an answer in clear (a web server\'s 400)', after: Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n'), detail: /0x48/ },
    { name: 'an SMTP error line', after: Buffer.from('500 5.5.1 what?\r\n'), detail: /0x35/ },
    { name: 'application data first', after: Buffer.from([23, 3, 3, 0, 5, 1, 2, 3, 4, 5]), detail: /0x17/ },
    { name: 'a handshake record with a version no server sends', after: Buffer.from([22, 4, 3, 0, 4, 2, 0, 0, 0]), detail: /version 0x0403/ },
    { name: 'an empty handshake record', after: Buffer.from([22, 3, 3, 0, 0]), detail: /0 bytes/ },
    { name: 'an alert record over 2^14 bytes', after: Buffer.from([21, 3, 3, 0x40, 1]), detail: /16385 bytes/ },
    { name: 'a handshake record, then a byte in clear', after: Buffer.from([22, 3, 3, 0, 1, 2, 0x32]), detail: /0x32/ },
  ];
  for (const c of cases) {
    const g = new TlsGuard('allowed.test');
    const steps: GuardStep[] = [];
    if (c.before) steps.push(g.fromClient(hello.subarray(0, 40)), g.fromServer(c.before), g.fromClient(hello.subarray(40)));
    else steps.push(g.fromClient(Buffer.concat([hello, Buffer.from('EHLO pipelined.test\r\n')])), g.fromServer(c.after!));
    t.match(verdicts(steps), [{ kind: 'deny', reason: 'tls_upstream_not_tls', detail: c.detail, tls: true }], c.name);
    t.same(sent(steps), c.before ? Buffer.alloc(0) : hello, `${c.name}: nothing the client pipelined behind its hello went up`);
    t.same(steps.flatMap((s) => [...(s.deliver ?? [])]), [], `${c.name}: nothing of the server reached the client`);
    t.equal(g.held, 0, `${c.name}: nothing held after the refusal`);
  }
});

t.test('an alert is TLS: a server that refuses the hello is passed on', async (t) => {
  const alert = Buffer.from([21, 3, 3, 0, 2, 2, 112]);
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(hello), g.fromServer(alert)];
  t.same(verdicts(steps), [{ kind: 'allow' }]);
  t.same(Buffer.concat([...(steps[1]!.deliver ?? [])]), alert);
});

t.test('a hello is held once, and nothing once the tunnel opens', async (t) => {
  // A 32 KiB hello announced and left one byte short, as a flood sends it.
  const body = 32 * 1024;
  const message = Buffer.alloc(4 + body, 0x41);
  message[0] = 1;
  message.writeUIntBE(body, 1, 3);
  const records: Buffer[] = [];
  for (let at = 0; at < message.length; at += 16_384) {
    const part = message.subarray(at, at + 16_384);
    records.push(Buffer.from([22, 3, 1, part.length >> 8, part.length & 0xff]), part);
  }
  const big = Buffer.concat(records).subarray(0, -1);
  for (const chunk of [big.length, 1_000, 1]) {
    const g = new TlsGuard('allowed.test');
    for (let at = 0; at < big.length; at += chunk) g.fromClient(big.subarray(at, at + chunk));
    t.ok(g.held >= big.length && g.held <= big.length + 8 * 1024, `in ${chunk}-byte chunks: ${big.length} bytes held as ${g.held}`);
  }
  const g = new TlsGuard('allowed.test');
  g.fromClient(hello);
  t.equal(g.held, 0, 'the forwarded hello is no longer the guard\'s');
  g.fromClient(EARLY_DATA);
  t.ok(g.held >= EARLY_DATA.length, 'bytes waiting for the server are held');
  g.fromServer(NORMAL.subarray(0, 10));
  t.ok(g.held >= EARLY_DATA.length + 10, 'and the server\'s, until judged');
  g.fromServer(NORMAL.subarray(10));
  t.equal(g.held, 0, 'open: nothing held');
});

t.test('deadlines and ends', async (t) => {
  const waiting = new TlsGuard('allowed.test');
  waiting.fromClient(hello.subarray(0, 10));
  t.match(waiting.timedOut().verdict, { kind: 'deny', reason: 'tls_hello_timeout' });
  const retry = new TlsGuard('allowed.test');
  retry.fromClient(hello);
  retry.fromServer(HRR);
  t.match(retry.clientEnded().verdict, { kind: 'deny', reason: 'tls_hello_malformed', detail: /before its second ClientHello/, tls: true }, 'a client gone before its second hello');
  const watching = new TlsGuard('allowed.test');
  watching.fromClient(hello);
  t.equal(watching.timedOut().verdict, undefined, 'no hello is due while the server has not answered');
  t.equal(watching.awaitingHello, false);
  t.equal(watching.clientEnded().verdict, undefined, 'a client that closes while the server has not answered is not refused yet');
  t.match(watching.fromServer(HRR).verdict, { kind: 'deny', reason: 'tls_hello_malformed', detail: /before its second ClientHello/ }, 'then a retry request refuses it at once');
  const closedThenAnswered = new TlsGuard('allowed.test');
  closedThenAnswered.fromClient(hello);
  closedThenAnswered.clientEnded();
  t.same(closedThenAnswered.fromServer(NORMAL).verdict, { kind: 'allow' }, 'and an ordinary answer opens it (the tunnel then ends the upstream side)');
});

t.test('what waits for the server is bounded', async (t) => {
  const g = new TlsGuard('allowed.test');
  g.fromClient(hello);
  let chunks = 0;
  while (!g.full && chunks < 20) {
    t.equal(g.fromClient(Buffer.alloc(4 * 1024, 23)).verdict, undefined, 'held, not refused');
    chunks++;
  }
  t.equal(chunks, 4, 'the tunnel is told to stop reading the client once 16 KiB wait');
  t.equal(chunks * 4 * 1024, MAX_WATCH_BYTES);
  // Reads already under way when the tunnel pauses may still arrive, up to a hard bound.
  t.match(g.fromClient(Buffer.alloc(2 * MAX_HELLO_BYTES + MAX_WATCH_BYTES, 23)).verdict, { kind: 'deny', reason: 'tls_hello_malformed' }, 'beyond the hard bound: refused, not held');
});
