/**
 * The inspected path's own HTTP/1.1 client (proxy/upstream/h1-pool.ts, h1-connection.ts) against
 * raw servers on loopback that answer with exactly the bytes each case needs: keep-alive reuse and
 * what ends it, request bodies framed by length or chunked, a reader that pauses, a body stream
 * that fails, an upstream that goes silent or closes, and a handler that throws. Every request
 * ends in exactly one of onComplete and onError.
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { PassThrough } from 'node:stream';
import t, { type Test } from 'tap';
import { H1Pool, Unsent, type PooledRequest, type UpstreamHandler } from '../../proxy/upstream/index.js';
import { connected, listen } from '../support/loopback.js';

interface Server {
  readonly port: number;
  /** Every connection's bytes, in the order the connections came. */
  readonly received: string[];
}

/** A server that answers each request head it reads (by count) with `answer(n, head)`, n from 0 across connections. */
async function serve(t: Test, answer: (n: number, head: string, socket: net.Socket) => string | undefined): Promise<Server> {
  const received: string[] = [];
  let n = 0;
  const server = net.createServer((socket) => {
    const index = received.push('') - 1;
    socket.on('error', () => undefined);
    let pending = '';
    socket.on('data', (d: Buffer) => {
      received[index] += d.toString('latin1');
      pending += d.toString('latin1');
      for (let end = pending.indexOf('\r\n\r\n'); end !== -1; end = pending.indexOf('\r\n\r\n')) {
        const head = pending.slice(0, end);
        pending = pending.slice(end + 4);
        const reply = answer(n++, head, socket);
        if (reply !== undefined) socket.write(reply);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  return { port: (server.address() as net.AddressInfo).port, received };
}

function poolTo(t: Test, port: number, options: { keepAliveMs?: number; idleTimeoutMs?: number } = {}): H1Pool {
  const pool = new H1Pool(
    () => connected(port),
    { idleTimeoutMs: options.idleTimeoutMs ?? 5_000, maxHeaderBytes: 16 * 1024, keepAliveMs: options.keepAliveMs ?? 4_000 },
  );
  t.teardown(() => pool.destroy());
  return pool;
}

interface Outcome {
  status?: number;
  fields?: readonly string[];
  body: string;
  completed: number;
  errors: Error[];
}

/** Sends `request` through `pool`; resolves once it ended, with what the handler heard. `pausing`: onData says stop, then resumes 50 ms later. */
function send(pool: H1Pool, request: Partial<PooledRequest> = {}, extra: { pausing?: boolean; throwing?: boolean } = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    const out: Outcome = { body: '', completed: 0, errors: [] };
    let resume: () => void = () => undefined;
    const settle = (): void => void setTimeout(() => resolve(out), 20);
    const handler: UpstreamHandler = {
      onConnect: () => undefined,
      onHeaders: (status, fields, go) => {
        out.status = status;
        out.fields = fields as string[];
        resume = go;
        return true;
      },
      onData: (chunk) => {
        if (extra.throwing) throw new Error('the handler failed');
        out.body += chunk.toString('latin1');
        if (extra.pausing) setTimeout(resume, 50);
        return !extra.pausing;
      },
      onComplete: () => {
        out.completed += 1;
        settle();
      },
      onError: (err) => {
        out.errors.push(err);
        settle();
      },
    };
    pool.dispatch({ method: 'GET', path: '/', headers: ['host', 'a.test'], body: null, unsent: new Unsent(), ...request }, handler);
  });
}

const OK = (body: string): string => `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`;

t.test('keep-alive: a second request reuses the connection; the response after it is read as its own', async (t) => {
  const server = await serve(t, (n) => OK(`r${n}`));
  const pool = poolTo(t, server.port);
  const first = await send(pool);
  t.same([first.status, first.body, first.completed, first.errors], [200, 'r0', 1, []]);
  t.equal(pool.stats.free, 1, 'the connection is idle in the pool');
  const second = await send(pool, { path: '/two' });
  t.equal(second.body, 'r1');
  t.equal(server.received.length, 1, 'one connection carried both');
  t.match(server.received[0], /^GET \/ HTTP\/1\.1\r\nhost: a\.test\r\n\r\nGET \/two HTTP\/1\.1\r\n/);
});

t.test('what ends keep-alive: bytes after a response, Connection: close, a short Keep-Alive timeout, a pool that keeps none', async (t) => {
  const answers = [
    `${OK('a')}HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil`,
    'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nb',
    'HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 1\r\n\r\nc',
  ];
  const server = await serve(t, (n) => answers[n] ?? OK('d'));
  const pool = poolTo(t, server.port);
  for (const body of ['a', 'b', 'c']) {
    const out = await send(pool);
    t.same([out.body, out.completed], [body, 1], `${body}: complete, and nothing after it read`);
  }
  t.equal((await send(pool)).body, 'd');
  t.equal(server.received.length, 4, 'each of them closed its connection');
  const alone = await serve(t, () => OK('x'));
  const once = poolTo(t, alone.port, { keepAliveMs: 0 });
  await send(once);
  await send(once);
  t.equal(alone.received.length, 2, 'a pool that keeps none opens a connection a request');
  t.match(alone.received[0], /\r\nconnection: close\r\n\r\n$/, 'and says so');
});

t.test('request bodies: by the Content-Length given, else chunked; a body stream that fails fails the request', async (t) => {
  // The first two are answered; the others, never: their bodies end them.
  const server = await serve(t, (n) => (n < 2 ? OK('ok') : undefined));
  const pool = poolTo(t, server.port);
  const sized = new PassThrough();
  const waiting = send(pool, { method: 'POST', headers: ['content-length', '5'], body: sized });
  sized.write('he');
  sized.end('llo');
  t.equal((await waiting).completed, 1);
  const chunked = new PassThrough();
  const waiting2 = send(pool, { method: 'POST', headers: [], body: chunked });
  chunked.write('he');
  chunked.end('llo');
  t.equal((await waiting2).completed, 1);
  t.match(server.received.join(''), /content-length: 5\r\n\r\nhello/);
  t.match(server.received.join(''), /transfer-encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n/);
  const failing = new PassThrough();
  const waiting3 = send(pool, { method: 'POST', headers: [], body: failing });
  failing.write('x');
  failing.destroy(Object.assign(new Error('a placeholder in the body'), { code: 'secret_wrong_host' }));
  const out = await waiting3;
  t.same([out.completed, out.errors.map((e) => e.message)], [0, ['a placeholder in the body']], 'its error, once');
  const short = new PassThrough();
  const waiting4 = send(pool, { method: 'POST', headers: ['content-length', '5'], body: short });
  short.end('hel');
  t.match((await waiting4).errors[0]?.message, /shorter than its Content-Length/);
});

t.test('a response before the request body is all sent: complete, the connection closed, and the body failing later is harmless', async (t) => {
  const server = await serve(t, () => OK('early'));
  const pool = poolTo(t, server.port);
  const body = new PassThrough();
  const waiting = send(pool, { method: 'POST', headers: ['content-length', '100'], body });
  body.write('x');
  const out = await waiting;
  t.same([out.body, out.completed], ['early', 1]);
  body.destroy(new Error('the client went'));
  await new Promise((r) => setTimeout(r, 20));
  t.equal(pool.stats.free, 0, 'not kept: the upstream still waits for the rest of a body');
});

t.test('a chunked upload larger than the socket takes at once arrives whole and in order, however the writes back up', async (t) => {
  let body = '';
  const server = await serve(t, (_n, _head, socket) => {
    // Read nothing for a while, so that the proxy's writes back up; then decode the chunks.
    socket.pause();
    setTimeout(() => socket.resume(), 300);
    return undefined;
  });
  const pool = poolTo(t, server.port);
  const upload = new PassThrough();
  const waiting = send(pool, { method: 'POST', headers: [], body: upload });
  for (let i = 0; i < 64; i++) upload.write(Buffer.alloc(64 * 1024, 65 + (i % 26)));
  upload.end();
  // The server answers once the whole chunked body is in: decoded here from what it received.
  for (const end = Date.now() + 10_000; Date.now() < end && !/\r\n0\r\n\r\n$/.test(server.received[0] ?? ''); ) await new Promise((r) => setTimeout(r, 20));
  let rest = (server.received[0] ?? '').slice((server.received[0] ?? '').indexOf('\r\n\r\n') + 4);
  for (;;) {
    const line = rest.indexOf('\r\n');
    const size = parseInt(rest.slice(0, line), 16);
    if (!(size > 0)) break;
    body += rest.slice(line + 2, line + 2 + size);
    t.equal(rest.slice(line + 2 + size, line + 4 + size), '\r\n', 'each chunk ends in CRLF');
    rest = rest.slice(line + 4 + size);
  }
  t.equal(body.length, 64 * 64 * 1024, 'every byte');
  t.ok([...Array(64).keys()].every((i) => body[i * 64 * 1024] === String.fromCharCode(65 + (i % 26)) && body[i * 64 * 1024 + 65535] === String.fromCharCode(65 + (i % 26))), 'in order');
  void waiting;
});

t.test('field bytes past ASCII go out as they came in, a byte a character', async (t) => {
  const server = await serve(t, () => OK('ok'));
  const out = await send(poolTo(t, server.port), { path: '/caf\u00e9', headers: ['x-name', 'Andr\u00e9'] });
  t.equal(out.completed, 1);
  t.match(server.received[0], /^GET \/caf\u00e9 HTTP\/1\.1\r\nx-name: Andr\u00e9\r\n/, 'one byte each (0xE9), not UTF-8');
});

t.test('a reader that pauses gets the rest once it resumes, and the response is complete after', async (t) => {
  const big = 'y'.repeat(300_000);
  const server = await serve(t, () => `HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${big.length.toString(16)}\r\n${big}\r\n0\r\n\r\n`);
  const out = await send(poolTo(t, server.port), {}, { pausing: true });
  t.same([out.body.length, out.completed, out.errors], [big.length, 1, []]);
});

t.test('an upstream silent past the idle timeout, or closing early, fails the request with its reason', async (t) => {
  const silent = await serve(t, () => undefined);
  const timedOut = await send(poolTo(t, silent.port, { idleTimeoutMs: 200 }));
  t.same(timedOut.errors.map((e) => (e as NodeJS.ErrnoException).code), ['upstream_timeout']);
  const closing = await serve(t, (_n, _head, socket) => void socket.end());
  const closed = await send(poolTo(t, closing.port));
  t.same(closed.errors.map((e) => (e as NodeJS.ErrnoException).code), ['upstream_failed']);
  const cut = await serve(t, (_n, _head, socket) => void socket.end('HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc'));
  const partial = await send(poolTo(t, cut.port));
  t.same([partial.body, partial.completed, partial.errors.map((e) => (e as NodeJS.ErrnoException).code)], ['abc', 0, ['bad_upstream_response']]);
  const bad = await serve(t, () => 'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n');
  const refused = await send(poolTo(t, bad.port));
  t.same([refused.status, refused.errors.map((e) => (e as NodeJS.ErrnoException).code)], [undefined, ['bad_upstream_response']], 'a malformed head reaches no handler');
});

t.test('a body malformed in the same read as its first bytes: the error is heard after what the handler wrote has gone out', async (t) => {
  const server = await serve(t, () => 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n');
  const order: string[] = [];
  await new Promise<void>((resolve) => {
    poolTo(t, server.port).dispatch({ method: 'GET', path: '/', headers: [], body: null, unsent: new Unsent() }, {
      onConnect: () => undefined,
      onHeaders: () => true,
      onData: (chunk) => {
        order.push(`data ${chunk.toString()}`);
        process.nextTick(() => order.push('a tick later'));
        return true;
      },
      onComplete: () => t.fail('not complete'),
      onError: (err) => {
        order.push(`error ${(err as NodeJS.ErrnoException).code ?? ''}`);
        resolve();
      },
    });
  });
  t.same(order, ['data abc', 'a tick later', 'error bad_upstream_response']);
});

t.test('a handler that throws fails its request; the process goes on, and the connection is not used again', async (t) => {
  const server = await serve(t, () => OK('z'));
  const pool = poolTo(t, server.port);
  const out = await send(pool, {}, { throwing: true });
  t.same(out.errors.map((e) => e.message), ['the handler failed']);
  t.equal(pool.stats.free, 0);
  t.equal((await send(pool)).body, 'z');
  t.equal(server.received.length, 2);
});

t.test('a request head that could carry a second request is never written', async (t) => {
  const server = await serve(t, () => OK('n'));
  const pool = poolTo(t, server.port);
  for (const request of [{ path: '/ HTTP/1.1\r\nX: y' }, { headers: ['x', 'a\r\nb: c'] }, { headers: ['x y', 'a'] }, { method: 'GET /' }]) {
    const out = await send(pool, request);
    t.match(out.errors[0]?.message, /cannot carry/, JSON.stringify(request));
  }
  t.equal(server.received.join(''), '', 'nothing reached the upstream');
});

t.test('given up: an abort before the response ends it once, and a later abort leaves the next request alone', async (t) => {
  const server = await serve(t, (n) => (n === 0 ? undefined : OK('late')));
  const pool = poolTo(t, server.port);
  let abort: (err?: Error) => void = () => undefined;
  const errors: Error[] = [];
  pool.dispatch({ method: 'GET', path: '/', headers: [], body: null, unsent: new Unsent() }, {
    onConnect: (a) => (abort = a),
    onHeaders: () => true,
    onData: () => true,
    onComplete: () => t.fail('not complete'),
    onError: (err) => errors.push(err),
  });
  await new Promise((r) => setTimeout(r, 50));
  abort(new Error('client gone'));
  abort(new Error('again'));
  await new Promise((r) => setImmediate(r));
  t.same(errors.map((e) => e.message), ['client gone']);
  const next = send(pool);
  abort(new Error('stale'));
  t.equal((await next).body, 'late', 'a stale abort does not touch another request');
});

/** A server that reads nothing and answers nothing, until the test ends: its port. */
async function stalledUpstream(t: Test): Promise<number> {
  const stalled = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.pause();
  });
  t.teardown(() => stalled.close());
  return listen(stalled);
}

t.test('an upstream that stops reading the request body and never answers fails it at the idle timeout', async (t) => {
  // Reads nothing, answers nothing: the proxy's writes back up and the body waits for a drain that never comes.
  const port = await stalledUpstream(t);
  const pool = poolTo(t, port, { idleTimeoutMs: 300 });
  const upload = new PassThrough();
  const waiting = send(pool, { method: 'POST', headers: ['content-length', String(64 * 1024 * 1024)], body: upload });
  const mb = Buffer.alloc(1024 * 1024, 120);
  for (let i = 0; i < 64; i++) upload.write(mb);
  upload.end();
  const out = await Promise.race([waiting, new Promise<undefined>((r) => setTimeout(r, 5_000, undefined))]);
  t.same(out?.errors.map((e) => (e as NodeJS.ErrnoException).code), ['upstream_timeout'], 'not held forever');
  upload.destroy();
});

t.test('a body that goes on emitting after its pause waits for one drain, not one a chunk', async (t) => {
  const port = await stalledUpstream(t);
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
  process.on('warning', onWarning);
  t.teardown(() => void process.off('warning', onWarning));
  const pool = poolTo(t, port, { idleTimeoutMs: 300 });
  // A stream whose pause does not hold (a source of its own, not a Readable): it emits regardless.
  const body = Object.assign(new EventEmitter(), { pause: () => body, resume: () => body });
  const waiting = send(pool, { method: 'POST', headers: ['content-length', String(40 * 1024 * 1024)], body: body as unknown as NodeJS.ReadableStream });
  for (const end = Date.now() + 5_000; Date.now() < end && body.listenerCount('data') === 0; ) await new Promise((r) => setTimeout(r, 5));
  const mb = Buffer.alloc(1024 * 1024, 120);
  for (let i = 0; i < 40; i++) body.emit('data', mb);
  const out = await waiting;
  t.same(out.errors.map((e) => (e as NodeJS.ErrnoException).code), ['upstream_timeout'], 'timed out as a silent upstream');
  t.same(warnings, [], 'no listener piled up on the socket');
});

t.test('closed while a request dials: the request is still sent and answered; destroyed: it fails', async (t) => {
  const server = await serve(t, () => OK('dialled'));
  const slowPool = (): H1Pool => {
    const pool = new H1Pool(
      () =>
        new Promise<net.Socket>((resolve, reject) => {
          const socket = net.connect(server.port, '127.0.0.1');
          socket.once('connect', () => setTimeout(() => resolve(socket), 50));
          socket.once('error', reject);
        }),
      { idleTimeoutMs: 5_000, maxHeaderBytes: 16 * 1024, keepAliveMs: 4_000 },
    );
    t.teardown(() => pool.destroy());
    return pool;
  };
  const closing = slowPool();
  const waiting = send(closing);
  await closing.close();
  const out = await waiting;
  t.same([out.body, out.completed, out.errors], ['dialled', 1, []], 'its requests in flight finish (as an undici Pool closed)');
  t.equal(closing.stats.free, 0, 'and its connection is not kept');
  const destroyed = slowPool();
  const failing = send(destroyed);
  await destroyed.destroy();
  t.same((await failing).errors.map((e) => (e as NodeJS.ErrnoException).code), ['upstream_failed']);
  t.equal(server.received.slice(1).join(''), '', 'the destroyed pool sent nothing');
});
