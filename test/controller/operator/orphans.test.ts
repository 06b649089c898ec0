/** gc's decision, without Docker: which listed resources are orphans, and why the rest stay. */
import t from 'tap';
import type { ContainerSummary, ResourceSummary } from '../../../controller/docker/engine.js';
import { decideOrphans } from '../../../controller/operator/index.js';

const NOW = Date.parse('2026-11-29T12:00:00Z');
const MIN_AGE = 10 * 60_000;
const old = NOW - 60 * 60_000;
const young = NOW - 60_000;
const named = (sandbox: string) => ({ 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': sandbox });

function container(name: string, sandbox: string, createdMs = old): ContainerSummary {
  return { id: `id-${name}`, name, image: 'img', state: 'running', status: 'Up', createdMs, labels: named(sandbox), networks: [] };
}
function resource(name: string, labels: Record<string, string>, createdMs = old): ResourceSummary {
  return { id: `id-${name}`, name, createdMs, labels };
}

const live = container('cap-live', 'cap-live');
const warm = (name: string, createdMs = old): ResourceSummary => resource(name, { 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.warm': '0a1b2c3d' }, createdMs);
const containers = [
  live,
  // A sandbox made on a warm network records it (sandbox/warm-networks.ts).
  { ...container('cap-onwarm', 'cap-onwarm'), labels: { ...named('cap-onwarm'), 'dev.capybara.sandbox.warm-network': 'cap-warm.0a1b2c3d.0' } },
  container('cap-live-egress', 'cap-live'),
  container('cap-gone-egress', 'cap-gone'),
  container('cap-new-egress', 'cap-new', young),
  // Hand-over containers a controller that died left behind (sandbox/workspace-handover.ts).
  container('cap-live.handover', 'cap-live'),
  container('cap-gone.handover', 'cap-gone'),
];
const networks = [
  resource('cap-live-net', named('cap-live')),
  resource('cap-gone-net', named('cap-gone')),
  resource('capybara-sandbox', { 'dev.capybara.sandbox': '1' }),
  resource('cap-noage-net', named('cap-noage'), 0),
  warm('cap-warm.0a1b2c3d.0'),
  // Past --min-age but inside the half hour its process may still hand it out.
  warm('cap-warm.0a1b2c3d.1', NOW - 20 * 60_000),
  warm('cap-warm.0a1b2c3d.2'),
];
const volumes = [
  resource('cap-gone-workspace', named('cap-gone')),
  resource('cap-ws.project-1', { ...named('cap-gone'), 'dev.capybara.sandbox.workspace': 'project-1' }),
  resource('cap-new-skills', named('cap-new'), young),
];

const decisions = decideOrphans({ allContainers: containers, containers, networks, volumes }, NOW, MIN_AGE);
const byName = new Map(decisions.map((d) => [d.name, d]));

const expected: { name: string; orphan: boolean; keep?: string }[] = [
  { name: 'cap-live', orphan: false, keep: 'sandbox_container' },
  { name: 'cap-live-egress', orphan: false, keep: 'sandbox_exists' },
  { name: 'cap-live-net', orphan: false, keep: 'sandbox_exists' },
  { name: 'cap-gone-egress', orphan: true },
  { name: 'cap-live.handover', orphan: false, keep: 'sandbox_exists' },
  { name: 'cap-gone.handover', orphan: true },
  { name: 'cap-gone-net', orphan: true },
  { name: 'cap-gone-workspace', orphan: true },
  { name: 'cap-ws.project-1', orphan: false, keep: 'persistent_workspace' },
  { name: 'capybara-sandbox', orphan: false, keep: 'no_sandbox_name' },
  { name: 'cap-new-egress', orphan: false, keep: 'too_young' },
  { name: 'cap-new-skills', orphan: false, keep: 'too_young' },
  { name: 'cap-noage-net', orphan: false, keep: 'age_unknown' },
  { name: 'cap-warm.0a1b2c3d.0', orphan: false, keep: 'warm_network_in_use' },
  { name: 'cap-warm.0a1b2c3d.1', orphan: false, keep: 'warm_network_waiting' },
  { name: 'cap-warm.0a1b2c3d.2', orphan: true },
];
for (const e of expected) {
  t.test(e.name, async (t) => {
    const d = byName.get(e.name);
    t.ok(d, 'decided');
    t.equal(d?.orphan, e.orphan, 'orphan');
    if (e.keep) t.equal(d?.keep, e.keep, 'reason to keep');
  });
}

t.test('a live sandbox outside the --label filter still protects its resources', async (t) => {
  const filtered = decideOrphans({ allContainers: [live], containers: [], networks: [resource('cap-live-net', named('cap-live'))], volumes: [] }, NOW, MIN_AGE);
  t.match(filtered, [{ name: 'cap-live-net', orphan: false, keep: 'sandbox_exists' }]);
});

t.test('a sandbox whose create never finished is half-built: all of it goes once its marker is past the grace period', async (t) => {
  const half = container('cap-half', 'cap-half');
  const fresh = container('cap-fresh', 'cap-fresh', young);
  const all = [half, container('cap-half-egress', 'cap-half'), fresh];
  const decided = decideOrphans({
    allContainers: all,
    containers: all,
    networks: [resource('cap-half-net', named('cap-half'))],
    volumes: [
      resource('cap-half-building', named('cap-half')),
      resource('cap-half-skills', named('cap-half')),
      resource('cap-ws.kept', { ...named('cap-half'), 'dev.capybara.sandbox.workspace': 'kept' }),
      // Another replica's create in progress: its marker is younger than the grace period.
      resource('cap-fresh-building', named('cap-fresh'), young),
      // A marker's name with another sandbox's label is not its marker.
      resource('cap-live-building', named('cap-other')),
    ],
  }, NOW, MIN_AGE);
  const by = new Map(decided.map((d) => [d.name, d]));
  for (const name of ['cap-half', 'cap-half-egress', 'cap-half-net', 'cap-half-building', 'cap-half-skills']) {
    t.match(by.get(name), { orphan: true, halfBuilt: true }, `${name}: half-built`);
  }
  t.match(by.get('cap-ws.kept'), { orphan: false, keep: 'persistent_workspace' }, 'a persistent workspace stays');
  t.match(by.get('cap-fresh'), { orphan: false, keep: 'sandbox_container' }, 'a create younger than the grace period is left alone');
  t.match(by.get('cap-fresh-building'), { orphan: false });
  t.equal(by.get('cap-live-building')?.halfBuilt, undefined);
});

t.test('a half-built sandbox on a warm network: the network goes with it, checked as its other resources are', async (t) => {
  // A controller that died mid-create after the sandbox container was made on the warm network it took.
  const half = { ...container('cap-halfwarm', 'cap-halfwarm'), labels: { ...named('cap-halfwarm'), 'dev.capybara.sandbox.warm-network': 'cap-warm.0a1b2c3d.7' } };
  const all = [half];
  const decided = decideOrphans({
    allContainers: all,
    containers: all,
    networks: [warm('cap-warm.0a1b2c3d.7'), warm('cap-warm.0a1b2c3d.8', young)],
    volumes: [resource('cap-halfwarm-building', named('cap-halfwarm'))],
  }, NOW, MIN_AGE);
  const by = new Map(decided.map((d) => [d.name, d]));
  t.match(by.get('cap-halfwarm'), { orphan: true, halfBuilt: true }, 'its container goes');
  // Kept as in use, it outlived the container it was kept for, with its shard's leg and the
  // sandbox's registration, until a later gc.
  t.match(by.get('cap-warm.0a1b2c3d.7'), { orphan: true, halfBuilt: true, sandbox: 'cap-halfwarm' }, 'its warm network goes in the same run, under its marker\'s check');
  t.match(by.get('cap-warm.0a1b2c3d.8'), { orphan: false, keep: 'warm_network_waiting' }, 'another warm network still waits');
});
