/**
 * The proxy's default resolver is never held up by lookups that get no answer: with a DNS server
 * that stays silent for every name under a wildcard (as an attacker's own zone can), two dozen
 * lookups in flight do not delay an answer for another name. (getaddrinfo, the old default, ran on
 * Node's four-thread pool and held a thread per silent lookup for the resolver's whole retry
 * schedule.) Runs in private network and mount namespaces, so /etc/resolv.conf can name a server
 * on their loopback; nothing leaves them. Concurrent lookups of one name share one question, and
 * a flood of silent lookups is capped so c-ares never runs out of query numbers.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { createLookup, MAX_LOOKUPS_IN_FLIGHT } from '../../proxy/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { needUnmet } from '../support/needs.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const probe = spawnSync('unshare', ['-n', '-m', '--', 'true'], { encoding: 'utf8' });
const unavailable = probe.status === 0 ? undefined : `cannot create network and mount namespaces here (unshare -n -m: ${(probe.stderr || probe.error?.message || 'failed').trim()})`;

t.test('silent lookups in flight do not delay another answer', async (t) => {
  if (unavailable !== undefined) return needUnmet(t, unavailable);
  const loader = process.execArgv.filter((a) => a.includes('typescript'));
  const run = spawnSync('unshare', ['-n', '-m', '--', process.execPath, ...loader, path.join(here, 'dns-driver.ts')], { encoding: 'utf8', timeout: 60_000 });
  t.equal(run.status, 0, `driver exited cleanly: ${run.stderr.slice(-2000)}`);
  const result = JSON.parse(run.stdout.trim().split('\n').pop() ?? '{}') as { ms: number; fast: { ok: boolean; addresses?: string[] } };
  t.same(result.fast, { ok: true, addresses: ['93.184.215.14'] });
  t.ok(result.ms < 1_000, `answered in ${result.ms?.toFixed(0)} ms behind 24 silent lookups`);
});

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

t.test('lookups beyond the in-flight cap fail at once and the process stays responsive', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  const lookup = createLookup({ servers: [dns.address], timeoutMs: 1_500 });
  const extra = 200;
  const names = Array.from({ length: MAX_LOOKUPS_IN_FLIGHT + extra }, (_, i) => `r${i}.silent.test`);
  for (const name of names) dns.set(name, { timeout: true });
  const started = performance.now();
  const pending = names.map((name) => lookup(name).then((outcome) => ({ outcome, ms: performance.now() - started })));
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
  const refused = results.filter((r) => !r.outcome.ok && /too many DNS lookups in flight/.test(r.outcome.detail));
  t.equal(refused.length, extra, 'exactly the lookups over the cap are refused');
  t.ok(refused.every((r) => r.outcome.ok === false && r.outcome.reason === 'dns_failed' && r.ms < 1_000), 'refused before any lookup timed out');
  const timedOut = results.filter((r) => !r.outcome.ok && r.outcome.reason === 'dns_timeout');
  t.equal(timedOut.length, MAX_LOOKUPS_IN_FLIGHT, 'the rest end at their deadline');
  t.ok(worstLagMs < 300, `event loop never stalled long (worst ${worstLagMs.toFixed(0)} ms)`);
  // With the flood over, lookups are accepted again.
  dns.set('after.test', { answers: ['93.184.215.14'] });
  t.same(await lookup('after.test'), { ok: true, addresses: ['93.184.215.14'] });
});
