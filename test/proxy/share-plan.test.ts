/**
 * A client's share of each pool (connections, lookups in flight, the memory budget): a quarter on
 * a proxy that serves one workload, a sixteenth per sandbox on a shared proxy (--tenants-dir),
 * which serves a shard's worth of them: four sandboxes at a quarter each held everything. The
 * connection share on a running shared proxy: test/proxy/tenants.test.ts.
 */
import t from 'tap';
import { clientShare, MAX_CLIENT_SHARE, SANDBOX_SHARE, shareFraction } from '../../proxy/budget/index.js';
import { parseConfig } from '../../proxy/config.js';
import type { LookupOutcome } from '../../policy/index.js';
import { limitLookups } from '../../proxy/dns/dns.js';
import { planResources } from '../../proxy/start-plan.js';

t.test('the memory budget per client: a quarter, or a sandbox\'s sixteenth on a shared proxy', async (t) => {
  t.equal(shareFraction(false), MAX_CLIENT_SHARE);
  t.equal(shareFraction(true), SANDBOX_SHARE);
  const one = parseConfig(['--allow-hosts', 'a.example', '--memory-limit-mb', '256'], {});
  const shared = parseConfig(['--tenants-dir', '/run/capybara-egress-test-tenants', '--memory-limit-mb', '256'], {});
  if (one === undefined || shared === undefined) return t.fail('both configurations parse');
  const a = planResources(one).memory;
  const b = planResources(shared).memory;
  t.equal(a.perClientBytes, Math.floor(a.totalBytes * 0.25), 'one workload: a quarter');
  t.equal(b.perClientBytes, Math.floor(b.totalBytes / 16), 'a shared proxy: a sixteenth per sandbox');
});

t.test('lookups in flight per client: a sandbox\'s share on a shared proxy', async (t) => {
  const started: string[] = [];
  const pending: ((outcome: LookupOutcome) => void)[] = [];
  const lookup = limitLookups((name) => {
    started.push(name);
    const outcome = new Promise<LookupOutcome>((resolve) => pending.push(resolve));
    return { outcome, queriesDone: outcome };
  }, 256, SANDBOX_SHARE);
  t.equal(clientShare(256, Infinity, SANDBOX_SHARE), 16);
  const flood = Array.from({ length: 40 }, (_, i) => lookup(`slow-${i}.test`, 'cap-a'));
  t.equal(started.length, 16, 'one sandbox starts a sixteenth of the pool');
  t.match(await flood[39], { ok: false, reason: 'dns_failed', detail: /its share: 16/ });
  for (const resolve of pending) resolve({ ok: false, reason: 'dns_timeout', detail: 'deadline' });
});
