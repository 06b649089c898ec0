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

t.test('the server answering in several pieces, and before the hello is even complete', async (t) => {
  const g = new TlsGuard('allowed.test');
  const steps = [g.fromClient(hello.subarray(0, 30)), g.fromServer(NORMAL.subarray(0, 3)), g.fromClient(hello.subarray(30)), g.fromServer(NORMAL.subarray(3))];
  t.same(sent(steps), hello);
  t.same(verdicts(steps), [{ kind: 'allow' }]);
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
