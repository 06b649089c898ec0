/**
 * The keep-alive pools of a shared proxy are a process-wide cap, and each sandbox keeps a share of
 * it (upstream-pools.ts). They were one least-recently-used list: a sandbox cycling through many
 * hosts under a wildcard entry made a pool per destination and closed every other sandbox's idle
 * keep-alive connections, whose next requests each paid for a new connection. Real undici pools,
 * against a keep-alive server on loopback; each request's upstream connection is known by the port
 * it came from.
 */
import http from 'node:http';
import t, { type Test } from 'tap';
import { defaultConnect, Unsent, UpstreamPools, type UpstreamPool } from '../../proxy/upstream/index.js';
import { listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';

/** One GET through `pool`; resolves with the response's body. */
function get(pool: UpstreamPool): Promise<string> {
  return new Promise((resolve, reject) => {
    const body: Buffer[] = [];
    pool.dispatch({ method: 'GET', path: '/', headers: [], body: null, unsent: new Unsent() }, {
      onConnect: () => undefined,
      onHeaders: () => true,
      onData: (chunk) => body.push(chunk) > 0,
      onComplete: () => resolve(Buffer.concat(body).toString()),
      onError: reject,
    });
  });
}

const A = 'cap-a/life-a-0001';
const B = 'cap-b/life-b-0001';

/** A keep-alive server on loopback, and pools of at most `maxPools`, `maxPoolsPerOwner` each, to it. */
async function poolsToServer(t: Test, maxPools: number, maxPoolsPerOwner: number) {
  const server = http.createServer((req, res) => res.writeHead(200, { 'Content-Length': String(req.socket.remotePort).length }).end(String(req.socket.remotePort)));
  server.keepAliveTimeout = 60_000;
  const port = await listen(server);
  const pools = new UpstreamPools({ connect: defaultConnect, connectTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxHeaderBytes: 64 * 1024, maxPools, maxPoolsPerOwner });
  t.teardown(() => {
    pools.destroy();
    server.close();
  });
  /** One GET to `host` for `owner`; resolves with the port its upstream connection came from. */
  const getFor = (host: string, owner: string): Promise<string> => get(pools.forTarget(host, port, ['127.0.0.1'], undefined, owner));
  return { pools, port, get: getFor };
}

t.test('a name whose resolver rotates its addresses keeps one pool: its next request reuses the idle connection', async (t) => {
  const { pools, port } = await poolsToServer(t, 16, 16);
  // Nothing listens on 127.0.0.2: a pool of the second order would dial it first, then 127.0.0.1 anew.
  const first = pools.forTarget('rr.test', port, ['127.0.0.1', '127.0.0.2']);
  const from = await get(first);
  // undici marks a connection free a moment after its response has ended.
  await settle(() => first.stats.free === 1, 'the connection idle');
  const rotated = pools.forTarget('rr.test', port, ['127.0.0.2', '127.0.0.1']);
  t.equal(rotated, first, 'the same addresses in another order are the same pool');
  t.equal(await get(rotated), from, 'the request reuses the idle keep-alive connection');
  t.not(pools.forTarget('rr.test', port, ['127.0.0.1']), first, 'another set of addresses is another pool');
});

t.test("a sandbox past its share of the pools closes its own, never another sandbox's idle connection", async (t) => {
  const { get } = await poolsToServer(t, 16, 4);
  const first = await get('b.test', B);
  // Sandbox A asks for more destinations than the whole process keeps pools for.
  const seen: string[] = [];
  for (let i = 0; i < 20; i += 1) seen.push(await get(`h${i}.a.test`, A));
  t.equal(await get('b.test', B), first, "b's next request reuses its idle keep-alive connection");
  t.not(await get('h0.a.test', A), seen[0], "a's least recently used pool was closed: its connection is a new one");
  t.equal(await get('h19.a.test', A), seen[19], "a's most recently used pool is kept");
});

t.test('a sandbox within its share, at the process cap, closes the least recently used pool of all', async (t) => {
  const { get } = await poolsToServer(t, 4, 2);
  const oldest = await get('b1.test', B);
  await get('b2.test', B);
  const c = await get('c.test', 'cap-c/life-c-0001');
  await get('d.test', 'cap-d/life-d-0001');
  await get('a.test', A);
  t.not(await get('b1.test', B), oldest, 'the pool used least recently was closed');
  t.equal(await get('c.test', 'cap-c/life-c-0001'), c, 'a pool used since is kept');
});

t.test('shedding idle connections takes from the owner holding the most of them first, never the least recently used of all', async (t) => {
  // Answers are held a moment, so that requests sent together each open a connection of their own.
  const server = http.createServer((req, res) => setTimeout(() => res.writeHead(200, { 'Content-Length': String(req.socket.remotePort).length }).end(String(req.socket.remotePort)), 20));
  server.keepAliveTimeout = 60_000;
  const port = await listen(server);
  const pools = new UpstreamPools({ connect: defaultConnect, connectTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxHeaderBytes: 64 * 1024, maxPools: 64, maxPoolsPerOwner: 16 });
  t.teardown(() => {
    pools.destroy();
    server.close();
  });
  const used = new Map<string, ReturnType<UpstreamPools['forTarget']>>();
  const getFor = (host: string, owner: string): Promise<string> => {
    const pool = pools.forTarget(host, port, ['127.0.0.1'], undefined, owner);
    used.set(host, pool);
    return get(pool);
  };
  // B's one idle connection is the least recently used; A holds twelve, four in each of three pools.
  const b = await getFor('b.test', B);
  const a = await Promise.all(['h0', 'h1', 'h2'].flatMap((h) => Array.from({ length: 4 }, () => getFor(`${h}.a.test`, A))));
  t.equal(new Set(a).size, 12, 'a holds twelve connections');
  // undici marks a connection free a moment after its response has ended.
  await settle(() => [...used.values()].reduce((n, pool) => n + pool.stats.free, 0) === 13, 'every connection idle');
  t.ok(pools.shedIdle(1) >= 1, 'idle connections were shed');
  t.equal(await getFor('b.test', B), b, "b's next request reuses its idle keep-alive connection");
  t.notOk(a.includes(await getFor('h0.a.test', A)), "a's least recently used pool was closed: its connection is a new one");
  t.ok(a.includes(await getFor('h2.a.test', A)), "a's other pools are kept");
});
