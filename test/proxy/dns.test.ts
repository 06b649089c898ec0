/**
 * The proxy's resolver on loopback: concurrent lookups of one name share one question, and a
 * flood of silent lookups is capped so c-ares never runs out of query numbers. (That silent
 * lookups never hold up another answer is dns-namespace.test.ts, which needs namespaces.)
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import type { LookupOutcome } from '../../policy/index.js';
import { createLookup, limitLookups, MAX_LOOKUPS_IN_FLIGHT } from '../../proxy/index.js';
import { clientShare } from '../../proxy/budget/limits.js';
import { openFilesFor, softOpenFileLimit } from '../../proxy/budget/fd-budget.js';
import { startDnsServer } from '../support/dns-server.js';
import { needUnmet } from '../support/needs.js';

t.test('concurrent lookups of one name share one question to the server', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  dns.set('shared.test', { answers: ['93.184.215.14'], delayMs: 50 });
  const lookup = createLookup({ servers: [dns.address], timeoutMs: 3_000 });
  const outcomes = await Promise.all(Array.from({ length: 20 }, () => lookup('shared.test')));
  for (const outcome of outcomes) t.same(outcome, { ok: true, addresses: ['93.184.215.14'] });
  t.equal(dns.questions('shared.test'), 1, 'one A question for twenty lookups');
  // Once answered, the next lookup asks again (no cache outlives the lookups that shared it).
  await lookup('shared.test');
  t.equal(dns.questions('shared.test'), 2);
});

t.test('a lower cap given to createLookup is the one it keeps', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  const lookup = createLookup({ servers: [dns.address], timeoutMs: 300, maxInFlight: 2 });
  for (const name of ['a.silent.test', 'b.silent.test', 'c.silent.test']) dns.set(name, { timeout: true });
  const [a, b, c] = await Promise.all(['a.silent.test', 'b.silent.test', 'c.silent.test'].map((name, i) => lookup(name, `client-${i}`)));
  t.same([a?.ok === false && a.reason, b?.ok === false && b.reason], ['dns_timeout', 'dns_timeout']);
  t.match(c, { ok: false, reason: 'dns_failed', detail: /too many DNS lookups in flight \(2\)/ });
});

t.test('lookups beyond the in-flight cap fail at once and the process stays responsive', async (t) => {
  // c-ares retries each silent query on a socket of its own: the flood holds two per lookup.
  const nofile = softOpenFileLimit(readFileSync('/proc/self/limits', 'utf8'));
  if (nofile !== undefined && nofile < openFilesFor(0)) return needUnmet(t, `an open-file limit of at least ${openFilesFor(0)} (ulimit -n is ${nofile})`);
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  const lookup = createLookup({ servers: [dns.address], timeoutMs: 1_500 });
  const extra = 200;
  const names = Array.from({ length: MAX_LOOKUPS_IN_FLIGHT + extra }, (_, i) => `r${i}.silent.test`);
  for (const name of names) dns.set(name, { timeout: true });
  const started = performance.now();
  // From many clients, each within its share: the total cap is what refuses.
  const pending = names.map((name, i) => lookup(name, `client-${i % 8}`).then((outcome) => ({ outcome, ms: performance.now() - started })));
  // The event loop's longest stall while the flood is in flight.
  let worstLagMs = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    worstLagMs = Math.max(worstLagMs, now - last - 20);
    last = now;
  }, 20);
  const results = await Promise.all(pending);
  clearInterval(ticker);
  const refused = results.filter((r) => !r.outcome.ok && /too many DNS lookups in flight \(/.test(r.outcome.detail));
  t.equal(refused.length, extra, 'exactly the lookups over the cap are refused');
  const timedOut = results.filter((r) => !r.outcome.ok && r.outcome.reason === 'dns_timeout');
  t.equal(timedOut.length, MAX_LOOKUPS_IN_FLIGHT, 'the rest end at their deadline');
  const lastRefusal = Math.max(...refused.map((r) => r.ms));
  const firstTimeout = Math.min(...timedOut.map((r) => r.ms));
  t.ok(refused.every((r) => r.outcome.ok === false && r.outcome.reason === 'dns_failed'), 'refused as dns_failed');
  t.ok(lastRefusal < firstTimeout, `refused before any lookup timed out (last refusal ${lastRefusal.toFixed(0)} ms, first timeout ${firstTimeout.toFixed(0)} ms)`);
  // Starting the flood must not hold the loop for a good part of the lookup deadline (1.5 s); the
  // bound leaves room for a loaded 2-core machine, where a few hundred ms of preemption happen.
  t.ok(worstLagMs < 1_000, `event loop never stalled long (worst ${worstLagMs.toFixed(0)} ms)`);
  // Once c-ares has given up the flood's queries (its retries can run past the deadline), lookups
  // are accepted again.
  dns.set('after.test', { answers: ['93.184.215.14'] });
  const deadline = Date.now() + 10_000;
  let after = await lookup('after.test');
  while (!after.ok && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    after = await lookup('after.test');
  }
  t.same(after, { ok: true, addresses: ['93.184.215.14'] });
});

t.test('a lookup slot is held until its queries end, not just until its deadline', async (t) => {
  const deferred = () => {
    let resolve!: (v: LookupOutcome) => void;
    const promise = new Promise<LookupOutcome>((r) => (resolve = r));
    return { promise, resolve };
  };
  const started: { name: string; outcome: ReturnType<typeof deferred>; done: ReturnType<typeof deferred> }[] = [];
  const lookup = limitLookups((name) => {
    const work = { name, outcome: deferred(), done: deferred() };
    started.push(work);
    return { outcome: work.outcome.promise, queriesDone: work.done.promise };
  }, 2);
  const timeout: LookupOutcome = { ok: false, reason: 'dns_timeout', detail: 'deadline' };
  const a = lookup('a.test', 'one');
  t.equal(lookup('a.test', 'two'), a, 'a second request for the name joins the first');
  void lookup('b.test', 'two');
  t.same(await lookup('c.test', 'three'), { ok: false, reason: 'dns_failed', detail: 'too many DNS lookups in flight (2); retry later' }, 'over the cap: refused at once');
  started[0]!.outcome.resolve(timeout);
  t.same(await a, timeout);
  t.match(await lookup('c.test'), { ok: false, reason: 'dns_failed' }, 'a past its deadline, its queries still running: still refused');
  started[0]!.done.resolve(timeout);
  await new Promise((r) => setImmediate(r));
  const c = lookup('c.test');
  t.same(started.map((w) => w.name), ['a.test', 'b.test', 'c.test'], 'its queries ended: the slot is free');
  started[1]!.outcome.resolve(timeout);
  started[1]!.done.resolve(timeout);
  await new Promise((r) => setImmediate(r));
  void lookup('a.test');
  t.same(started.map((w) => w.name), ['a.test', 'b.test', 'c.test', 'a.test'], 'a name whose lookup ended is looked up afresh');
  started[2]!.outcome.resolve(timeout);
  await c;
});

t.test('one client holds at most its share of the lookups in flight; the others keep theirs', async (t) => {
  const started: string[] = [];
  const pending: ((outcome: LookupOutcome) => void)[] = [];
  const lookup = limitLookups((name) => {
    started.push(name);
    const outcome = new Promise<LookupOutcome>((resolve) => pending.push(resolve));
    return { outcome, queriesDone: outcome };
  }, 64);
  const share = clientShare(64);
  t.equal(share, 16, 'a quarter of the pool');
  // The flood: never-answered names from one client, far more than its share.
  const flood = Array.from({ length: 200 }, (_, i) => lookup(`slow-${i}.wild.test`, '10.0.0.9'));
  t.equal(started.length, share, 'the flood started only its share of lookups');
  const refused = await Promise.race([Promise.all(flood.slice(share)), new Promise((r) => setTimeout(() => r('pending'), 100))]);
  t.ok(Array.isArray(refused), 'the rest of the flood was refused at once');
  t.match((refused as LookupOutcome[])[0], { ok: false, reason: 'dns_failed', detail: /from 10\.0\.0\.9 \(its share: 16\)/ });
  // Another client still has every lookup it needs, up to its own share.
  for (let i = 0; i < share; i++) void lookup(`good-${i}.test`, '10.0.0.10');
  t.equal(started.length, 2 * share, "the other client's lookups all started");
  t.match(await lookup('one-more.test', '10.0.0.10'), { ok: false, detail: /its share/ }, 'and it too is held to its share');
  // A slot comes back to its client when its lookup's queries end.
  pending[0]!({ ok: false, reason: 'dns_timeout', detail: 'deadline' });
  await new Promise((r) => setImmediate(r));
  void lookup('slow-again.wild.test', '10.0.0.9');
  t.equal(started.at(-1), 'slow-again.wild.test', 'a freed slot is the client\'s again');
  for (const resolve of pending) resolve({ ok: false, reason: 'dns_timeout', detail: 'deadline' });
});
