/**
 * The per-request counters (decisions, bytes) are tallied in plain numbers and handed to
 * prom-client at each read: every scrape must see exactly what counting each call would show,
 * cumulative across scrapes, through every way of reading (text, JSON, one metric).
 */
import t from 'tap';
import { createProxyMetrics } from '../../proxy/record/metrics.js';

t.test('decisions and bytes read the same as counted one by one, scrape after scrape', async (t) => {
  const { registry, observer } = createProxyMetrics(() => 0);
  let text = await registry.metrics();
  t.notMatch(text, /egress_decisions_total\{/, 'no series before any decision');

  for (let i = 0; i < 3; i++) observer.decision('allow', 'allowed');
  observer.decision('deny', 'host_not_allowed');
  observer.httpBytes(10, 0);
  observer.httpBytes(5, 0);
  text = await registry.metrics();
  t.match(text, /egress_decisions_total\{outcome="allow",reason="allowed"\} 3\n/);
  t.match(text, /egress_decisions_total\{outcome="deny",reason="host_not_allowed"\} 1\n/);
  t.match(text, /egress_bytes_total\{direction="up",kind="http"\} 15\n/);
  t.match(text, /egress_bytes_total\{direction="down",kind="http"\} 0\n/, 'a zero added still makes its series, as an inc(0) did');
  t.notMatch(text, /kind="tunnel"/, 'a label set never added to has no series');

  observer.decision('allow', 'allowed');
  observer.tunnelOpened();
  observer.tunnelClosed(7, 9);
  // The same metric read another way: the collect runs on every read, and never counts twice.
  const json = await registry.getMetricsAsJSON();
  const decisions = json.find((m) => m.name === 'egress_decisions_total');
  t.same(
    decisions?.values.map((v) => [v.labels.outcome, v.labels.reason, v.value]).sort(),
    [
      ['allow', 'allowed', 4],
      ['deny', 'host_not_allowed', 1],
    ],
  );
  const bytes = await registry.getSingleMetric('egress_bytes_total')?.get();
  const of = (direction: string, kind: string): number | undefined => bytes?.values.find((v) => v.labels.direction === direction && v.labels.kind === kind)?.value;
  t.equal(of('up', 'http'), 15);
  t.equal(of('up', 'tunnel'), 7);
  t.equal(of('down', 'tunnel'), 9);
  text = await registry.metrics();
  t.match(text, /egress_decisions_total\{outcome="allow",reason="allowed"\} 4\n/, 'a later scrape does not add again');
});
