/**
 * The inspected path's own HTTP/1.1 client (h1-pool.ts) against a seeded hostile upstream
 * (support/hostile-answers.ts, the answers upstream-fuzz.test.ts sends through the whole proxy on
 * the plain path). Whatever comes back, each request ends exactly once, in onComplete or onError;
 * a head that reaches the handler has a status of 200-599; body bytes come only after a head and
 * never include what follows a delimited message; a body delimited by its length arrives whole;
 * and a connection kept for the next request answers it with that request's response, or fails
 * it, never with leftovers (unless the answer before it came slowly, a piece at a time: see below). FUZZ_SEED and FUZZ_CASES override the bounded defaults.
 */
import net from 'node:net';
import t from 'tap';
import { H1Pool, Unsent } from '../../proxy/upstream/index.js';
import { generate, writeAnswer, type Answer } from '../support/hostile-answers.js';
import { connected } from '../support/loopback.js';
import { prng } from '../support/prng.js';

const SEED = Number(process.env.FUZZ_SEED ?? 0x5eed1);
const CASES = Number(process.env.FUZZ_CASES ?? 600);

const answers = new Map<string, Answer>();
const server = net.createServer((socket) => {
  socket.on('error', () => undefined);
  let pending = '';
  socket.on('data', async (d: Buffer) => {
    pending += d.toString('latin1');
    for (let end = pending.indexOf('\r\n\r\n'); end !== -1; end = pending.indexOf('\r\n\r\n')) {
      const head = pending.slice(0, end);
      pending = pending.slice(end + 4);
      const path = /^[A-Z]+ (\S+)/.exec(head)?.[1] ?? '';
      // A request on a connection kept alive: answered plainly, so that leftovers would show.
      const answer = answers.get(path);
      if (answer === undefined) {
        socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${path.length}\r\n\r\n${path}`);
        continue;
      }
      await writeAnswer(socket, answer);
    }
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as net.AddressInfo).port;
t.teardown(() => server.close());

/** A pool of one worker's own: the request after a case can only reuse that case's connection. */
function newPool(): H1Pool {
  const pool = new H1Pool(() => connected(port), { idleTimeoutMs: 400, maxHeaderBytes: 64 * 1024, keepAliveMs: 4_000 });
  t.teardown(() => pool.destroy());
  return pool;
}

interface Heard {
  status?: number;
  body: string;
  ends: string[];
  problems: string[];
}

function request(pool: H1Pool, path: string, method: string): Promise<Heard> {
  return new Promise((resolve) => {
    const heard: Heard = { body: '', ends: [], problems: [] };
    const settle = (): void => void setTimeout(() => resolve(heard), 30);
    pool.dispatch({ method, path, headers: ['host', 'hostile.test'], body: null, unsent: new Unsent() }, {
      onConnect: () => undefined,
      onHeaders: (status) => {
        if (heard.status !== undefined) heard.problems.push('a second head');
        if (status < 200 || status > 599) heard.problems.push(`status ${status} passed on`);
        heard.status = status;
        return true;
      },
      onData: (chunk) => {
        if (heard.status === undefined) heard.problems.push('body before a head');
        if (heard.ends.length > 0) heard.problems.push('body after the end');
        heard.body += chunk.toString('latin1');
        return true;
      },
      onComplete: () => {
        heard.ends.push('complete');
        settle();
      },
      onError: (err) => {
        heard.ends.push(`error ${(err as NodeJS.ErrnoException).code ?? err.message}`);
        settle();
      },
    });
  });
}

t.test(`${CASES} hostile answers (seed ${SEED})`, async (t) => {
  const rnd = prng(SEED);
  const outcomes = new Map<string, number>();
  let next = 0;
  const worker = async (): Promise<void> => {
    const pool = newPool();
    for (let i = next++; i < CASES; i = next++) {
      const path = `/case${i}`;
      const answer = generate(rnd);
      answers.set(path, answer);
      const method = rnd() < 0.15 ? 'HEAD' : 'GET';
      const heard = await Promise.race([request(pool, path, method), new Promise<Heard>((r) => setTimeout(() => r({ body: '', ends: [], problems: ['never ended'] }), 5_000))]);
      const bytes = answer.pieces.map((p) => p.bytes.toString('latin1')).join('');
      const problems = [...heard.problems];
      if (heard.ends.length !== 1 && !problems.includes('never ended')) problems.push(`ended ${heard.ends.length} times: ${heard.ends.join(', ')}`);
      if (heard.body.includes('evil')) problems.push('bytes after the message passed on');
      const length = /\r\nContent-Length: (\d+)\r\n/.exec(bytes.slice(0, bytes.indexOf('\r\n\r\n') + 2))?.[1];
      if (heard.ends[0] === 'complete' && method === 'GET' && length !== undefined && heard.status !== 204 && heard.status !== 304 && heard.body.length !== Number(length)) {
        problems.push(`complete with ${heard.body.length} body bytes, not the ${length} declared`);
      }
      for (const problem of problems) t.fail(`case ${i} (${method}): ${problem}`, { answer: bytes.slice(0, 300) });
      // Whatever this connection did, the request after it is answered with its own response, or
      // fails: never with another's. It may fail where the upstream closed the connection just
      // after a complete response (it can go out before the close is read, with any client); it
      // may hear anything after an answer written slowly, whose last piece can come after it went
      // out (the upstream's own bytes, to the same sandbox's request to the same host: the pools
      // are per sandbox, and a request a secret goes into never shares a connection).
      const after = await request(pool, `/after${i}`, 'GET');
      const own = after.ends[0] === 'complete' && after.body === `/after${i}`;
      const slow = answer.pieces.some((p) => p.pause > 0);
      const failed = after.ends.length === 1 && after.ends[0] !== 'complete';
      if (!slow && !own && !(failed && answer.finish !== 'open')) {
        t.fail(`case ${i}: the request after it heard ${JSON.stringify([after.ends, after.body.slice(0, 40)])}`, { answer: bytes.slice(0, 300), finish: answer.finish, heard: heard.ends });
      }
      const key = heard.ends[0] ?? 'never';
      outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries([...outcomes].sort((a, b) => b[1] - a[1])))}`);
  t.pass('every case ended once, and every request after one heard its own response');
});
