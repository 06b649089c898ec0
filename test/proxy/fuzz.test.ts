/**
 * A seeded fuzzer against a running in-process proxy: request lines, headers and CONNECT
 * authorities from fixtures/fuzz-corpus.json, mutated (byte flips, inserted CR/LF/NUL/space and
 * URL delimiters, Unicode, truncation, deletion, duplicated headers, splices of two seeds).
 * Whatever arrives, the proxy must not crash, must answer with a refusal that names its reason or
 * with an allowed exchange with the one pinned loopback upstream, must dial nothing else, and must
 * hold no socket once the clients have gone. Everything stays on loopback: the only pinned name is
 * up.test (127.0.0.1) and the test DNS server answers private addresses or NXDOMAIN, which the
 * policy refuses before any dial. FUZZ_SEED and FUZZ_CASES override the bounded defaults.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { prng } from '../support/prng.js';
import { isReason } from '../../policy/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { rawRequest } from '../support/raw-client.js';
import { startTestProxy } from '../support/test-proxy.js';

const SEED = Number(process.env.FUZZ_SEED ?? 0x0e9e55);
const CASES = Number(process.env.FUZZ_CASES ?? 3_000);
const PARALLEL = 64;
const CASE_TIMEOUT_MS = 3_000;

const corpus = (JSON.parse(readFileSync(new URL('./fixtures/fuzz-corpus.json', import.meta.url), 'utf8')) as { cases: { name: string; request: string }[] }).cases;

const SPECIAL = ['\r', '\n', '\r\n', '\0', ' ', '\t', '@', '#', '%', '%00', '%2e', '\\', '[', ']', ':', '/', '?', '*', '.', '..', '\u212a', 'ⓔ', 'é', '\u0130', '\u{1f600}', '\xff', '\x7f', ':0', ':65536', '[::1]', '127.0.0.1', 'up.test'];

/** One to three mutations of a seed request. */
function mutate(seed: Buffer, other: Buffer, rnd: () => number): Buffer {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  let b = seed;
  const rounds = 1 + Math.floor(rnd() * 3);
  for (let r = 0; r < rounds; r++) {
    const at = Math.floor(rnd() * (b.length + 1));
    switch (Math.floor(rnd() * 7)) {
      case 0: // byte flip
        if (b.length > 0) {
          b = Buffer.from(b);
          const i = Math.min(at, b.length - 1);
          b[i] = b[i]! ^ (1 << Math.floor(rnd() * 8));
        }
        break;
      case 1: // insertion of a special character or token
        b = Buffer.concat([b.subarray(0, at), Buffer.from(pick(SPECIAL)), b.subarray(at)]);
        break;
      case 2: // replacement of one character
        b = Buffer.concat([b.subarray(0, at), Buffer.from(pick(SPECIAL)), b.subarray(at + 1)]);
        break;
      case 3: // truncation
        b = b.subarray(0, at);
        break;
      case 4: // deletion of a short run
        b = Buffer.concat([b.subarray(0, at), b.subarray(at + 1 + Math.floor(rnd() * 8))]);
        break;
      case 5: {
        // duplication of a header line (or of the request line)
        const lines = b.toString('latin1').split('\r\n');
        const i = Math.floor(rnd() * Math.max(1, lines.length - 2));
        lines.splice(i + 1, 0, lines[i] ?? '');
        b = Buffer.from(lines.join('\r\n'), 'latin1');
        break;
      }
      default: // splice: the head of this seed with the tail of another
        b = Buffer.concat([b.subarray(0, at), other.subarray(Math.floor(rnd() * other.length))]);
    }
  }
  return b;
}

/** `waiting`: nothing yet when the client gave up (the proxy may rightly wait for a body); `closed_silently` is a violation. */
type Outcome = 'refused' | 'tunnel' | 'forwarded' | 'health' | 'waiting' | 'closed_silently' | 'violation';

/** Classifies the first final response to one request; 1xx interim heads are skipped. */
function classify(text: string, gaveUp = false): { outcome: Outcome; head: string; reason?: string } {
  let rest = text;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end === -1) return { outcome: rest.length > 0 ? 'violation' : gaveUp ? 'waiting' : 'closed_silently', head: rest.slice(0, 200) };
    const head = rest.slice(0, end);
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0);
    if (status >= 100 && status < 200) {
      rest = rest.slice(end + 4);
      continue;
    }
    const reason = /^x-egress-reason: *(.*)$/im.exec(head)?.[1]?.trim();
    if (reason !== undefined) {
      const ok = status >= 400 && isReason(reason);
      return { outcome: ok ? 'refused' : 'violation', head, reason };
    }
    if (/^x-upstream: fuzz$/im.test(head)) return { outcome: 'forwarded', head };
    if (/^HTTP\/1\.1 200 Connection Established$/.test(head)) return { outcome: 'tunnel', head };
    if (status === 200 && rest.slice(end + 4).startsWith('ok')) return { outcome: 'health', head };
    return { outcome: 'violation', head };
  }
}

/** Sends one request and reads until a final head (and its body) has arrived, or the end. */
function exchange(port: number, bytes: Buffer): Promise<{ text: string; gaveUp: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    let text = '';
    let gaveUp = false;
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, gaveUp });
    };
    const timer = setTimeout(() => {
      gaveUp = true;
      done();
    }, CASE_TIMEOUT_MS);
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      const c = classify(text);
      if (c.outcome !== 'violation' && c.outcome !== 'closed_silently' && c.outcome !== 'waiting') {
        const length = Number(/^content-length: *(\d+)$/im.exec(c.head)?.[1] ?? 0);
        if (text.length - text.indexOf(c.head) - c.head.length - 4 >= length) done();
      }
    });
    socket.on('error', done);
    socket.on('close', done);
    socket.write(bytes);
  });
}

// The pinned upstream: an HTTP server that marks its answers, so a forwarded answer cannot be
// mistaken for one the proxy wrote; raw tunnel bytes reach it too.
let upstreamConnections = 0;
const upstream = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => res.writeHead(200, { 'X-Upstream': 'fuzz', 'Content-Length': '2' }).end('up'));
});
upstream.on('connection', () => (upstreamConnections += 1));
upstream.on('clientError', (_err, socket) => socket.destroy());
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
const upPort = (upstream.address() as net.AddressInfo).port;

const dns = await startDnsServer();
dns.set('a.dns.test', { answers: ['10.0.0.1'] });
dns.set('b.dns.test', { answers: ['127.0.0.1'] });
dns.set('c.dns.test', { answers: ['::ffff:127.0.0.1', 'fd00::1'] });
dns.set('key.test', { answers: ['192.168.1.1'] });

const uncaught: unknown[] = [];
const onUncaught = (err: unknown): void => void uncaught.push(err);
process.on('uncaughtException', onUncaught);

const proxyT = await startTestProxy({
  policy: { allowHosts: ['up.test', '*.dns.test', 'key.test', '*.up.test'], connectPorts: [upPort], testHosts: { 'up.test': '127.0.0.1' } },
  dnsServer: dns.address,
  dnsTimeoutMs: 300,
  limits: { headerTimeoutMs: 500, idleTimeoutMs: 5_000 },
});
t.teardown(async () => {
  process.off('uncaughtException', onUncaught);
  await proxyT.close();
  upstream.closeAllConnections();
  upstream.close();
  await dns.close();
});

t.test(`fuzz: ${CASES} mutated requests, seed ${SEED} (rerun with FUZZ_SEED=${SEED})`, async (tt) => {
  t.comment(`fuzz seed ${SEED}, ${CASES} cases`);
  const rnd = prng(SEED);
  const seeds = corpus.map((c) => Buffer.from(c.request.replaceAll('{PORT}', String(upPort)), 'utf8'));
  const cases: Buffer[] = [...seeds];
  while (cases.length < CASES) cases.push(mutate(seeds[Math.floor(rnd() * seeds.length)]!, seeds[Math.floor(rnd() * seeds.length)]!, rnd));

  const counts = new Map<string, number>();
  /** Per first line of a bad answer: how often, and the first case that produced it. */
  const violations: Record<string, { count: number; first: string }> = {};
  const started = Date.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < cases.length) {
      const i = next++;
      const { text, gaveUp } = await exchange(proxyT.port, cases[i]!);
      const got = classify(text, gaveUp);
      const key = got.reason ? `${got.outcome}:${got.reason}` : got.outcome;
      counts.set(key, (counts.get(key) ?? 0) + 1);
      if (got.outcome === 'waiting') tt.comment(`no answer within ${CASE_TIMEOUT_MS} ms: case ${i} ${JSON.stringify(cases[i]!.toString('latin1'))}`);
      if (got.outcome === 'violation' || got.outcome === 'closed_silently') {
        const key = got.head.split('\r\n')[0] || got.outcome;
        const seen = (violations[key] ??= { count: 0, first: `case ${i}: ${JSON.stringify(cases[i]!.toString('latin1'))}` });
        seen.count += 1;
      }
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
  tt.comment(`${cases.length} cases in ${Date.now() - started} ms: ${JSON.stringify(Object.fromEntries([...counts].sort()))}`);

  tt.same(violations, {}, 'every answer is a refusal with a known X-Egress-Reason, or an exchange with the pinned upstream');
  tt.same(uncaught, [], 'no uncaught exception');
  const stray = proxyT.dialed.filter((d) => d !== `127.0.0.1:${upPort}`);
  tt.same(stray, [], `only the pinned upstream was dialed (${proxyT.dialed.length} dials, ${upstreamConnections} upstream connections)`);
  tt.equal(proxyT.logs.filter((l) => l.reason === 'internal_error').length, 0, 'no decision failed internally');
  tt.ok((counts.get('tunnel') ?? 0) > 0 && (counts.get('forwarded') ?? 0) > 0, 'the corpus still reaches the upstream (the fuzzer is not only hitting the parser)');

  const deadline = Date.now() + 5_000;
  while (proxyT.proxy.openConnections > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  tt.equal(proxyT.proxy.openConnections, 0, 'no client connection left open on the proxy');
  const health = await rawRequest(proxyT.port, 'GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n');
  health.socket.destroy();
  tt.equal(health.status, 200, 'the proxy still answers /healthz');
});
