/**
 * The egress cases end to end, in a private network namespace with a real DNS server on its
 * loopback: every verdict, status and reason, allowed tunnels and requests reaching a real
 * upstream, failover, rebinding, and addresses that cannot be reached. Nothing leaves the
 * namespace; where namespaces cannot be made, the test says so and skips.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { fileNeeds, needUnmet } from '../support/needs.js';
import { opensslUnavailable } from '../support/tls-cert.js';

await fileNeeds(t, 'netns');

const here = path.dirname(fileURLToPath(import.meta.url));
const fixturePath = path.join(here, 'fixtures', 'egress-cases.json');
const fixture = JSON.parse(readFileSync(fixturePath, 'utf8')) as {
  cases: { id: string; name: string; expect: 'allow' | 'deny'; status: number; reason?: string; anyClientError?: boolean; lookups?: number }[];
};

const unavailable = opensslUnavailable();

t.test('egress cases in a private network namespace', async (t) => {
  if (unavailable !== undefined) return needUnmet(t, unavailable);
  const loader = ['--import=tsx'];
  const run = spawnSync('unshare', ['-n', '--', process.execPath, ...loader, path.join(here, 'netns-driver.ts'), fixturePath], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  t.equal(run.status, 0, `driver exited cleanly: ${run.stderr.slice(-2000)}`);
  const results = new Map(
    run.stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .map((r) => [r.id as string, r]),
  );
  for (const c of fixture.cases) {
    const r = results.get(c.id);
    t.test(`${c.id} ${c.name}`, async (t) => {
      t.ok(r, 'has a result');
      if (!r) return;
      t.notOk(r.error, `no client error: ${String(r.error ?? '')}`);
      if (c.anyClientError) {
        t.ok((r.status as number) >= 400 && (r.status as number) < 500, `a 4xx refusal (got ${String(r.status)})`);
        t.ok(r.reason, 'with X-Egress-Reason');
      } else {
        t.equal(r.status, c.status, 'status');
      }
      if (c.reason) t.equal(r.reason, c.reason, 'X-Egress-Reason');
      if (c.expect === 'allow') t.equal(r.reached, true, 'the upstream was reached');
      else t.equal(r.reached, false, 'the upstream was not reached');
      if (c.lookups !== undefined) t.equal(r.lookups, c.lookups, 'DNS asked once');
      if (c.id === 'P-02') t.same(r.dialed, ['93.184.215.14:443', '93.184.215.15:443'], 'failover dials only checked addresses, in order');
      if (c.id === 'P-03') {
        t.equal(r.lookups, 1, 'no extra lookups');
        t.same(r.dialed, ['93.184.215.14:443', '93.184.215.15:443'], 'both checked addresses tried');
      }
      if (c.reason === 'address_not_allowed' || c.reason === 'ip_literal' || c.reason === 'host_not_allowed') t.same(r.dialed, [], 'nothing dialed');
    });
  }
  for (const [id, port] of [['SELF-CONNECT', 3128], ['SELF-HTTP', 3128], ['SELF-METRICS-CONNECT', 9464], ['SELF-METRICS-HTTP', 9464]] as const) {
    t.test(`${id}: a listed name that resolves to the proxy's own address and port is refused, never dialed`, async (t) => {
      const r = results.get(id);
      t.match(r, { status: 403, reason: 'address_not_allowed', detail: new RegExp(`the proxy's own address: port ${port} there is one of its listeners`), dialed: [] });
    });
  }
});
