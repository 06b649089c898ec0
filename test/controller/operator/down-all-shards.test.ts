/**
 * `down --all` on the shared egress (controller/operator/down-all.ts), on the in-memory engine: the
 * shards go once their sandboxes are gone, and with --label only when no sandbox outside the label
 * is still served by them (a shard carries the labels of whichever process made it).
 */
import t from 'tap';
import pino from 'pino';
import { createDockerSandbox } from '../../../controller/index.js';
import type { DockerEngine } from '../../../controller/docker/index.js';
import { destroyAllSandboxes } from '../../../controller/operator/down-all.js';
import { IMAGES } from '../../../common/index.js';
import { FAKE_LABELS, fakeSandbox } from '../../support/fake-sandbox.js';

const SHARD = 'cap-egress.0.capybara-sandbox';
const spec = (id: string) => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts: ['pypi.org'] } });

t.test('down --all --label keeps a shard that still serves a sandbox without the label', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const teamA = { ...FAKE_LABELS, team: 'a' };
  const labelled = createDockerSandbox({ endpoint: 'unix:///nonexistent/fake-engine.sock', egressIsolation: 'shared' }, { labels: teamA }, { logger: pino({ level: 'silent' }), engine: s.engine });
  // The first create makes the shard, with its process's labels (team=a); b is served by it too.
  await labelled.create(spec('a'));
  const b = await s.provider.create(spec('b'));
  t.equal((await s.engine.inspectContainer(SHARD))?.labels.team, 'a', 'the shard carries the labels of the process that made it');
  const progress: string[] = [];
  const r = await destroyAllSandboxes({ engine: s.engine as unknown as DockerEngine, provider: labelled, sharedNetwork: 'capybara-sandbox', labels: { team: 'a' }, progress: (l) => progress.push(l) });
  t.same(r.destroyed, ['cap-a'], 'only the labelled sandbox');
  t.ok(s.engine.containers.has(SHARD), `the shard serving b stays (${progress.join('; ')})`);
  t.ok(s.engine.volumes.has(SHARD), 'and its registrations');
  t.ok(s.engine.reachable('cap-b', 'cap-b-egress'), 'b is still served');
  t.equal((await s.provider.exec(b, 'true')).exitCode, 0);

  // Without a label every sandbox goes, and then the shard with its volume.
  const all = await destroyAllSandboxes({ engine: s.engine as unknown as DockerEngine, provider: s.provider, sharedNetwork: 'capybara-sandbox', labels: {}, progress: () => undefined });
  t.same(all.destroyed, ['cap-b']);
  t.notOk(s.engine.containers.has(SHARD), 'the shard is removed');
  t.notOk(s.engine.volumes.has(SHARD), 'with its volume');
});

t.test('down --all --label removes its shard though another deployment\'s sandbox has a shard of the same number', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared' });
  const labelled = (labels: Record<string, string>, network?: string) =>
    createDockerSandbox({ endpoint: 'unix:///nonexistent/fake-engine.sock', egressIsolation: 'shared', ...(network === undefined ? {} : { network }) }, { labels: { ...FAKE_LABELS, ...labels } }, { logger: pino({ level: 'silent' }), engine: s.engine });
  const mine = labelled({ dep: 'mine' });
  await labelled({ dep: 'other' }, 'capother').create(spec('x'));
  await mine.create(spec('y'));
  const r = await destroyAllSandboxes({ engine: s.engine as unknown as DockerEngine, provider: mine, sharedNetwork: 'capybara-sandbox', labels: { dep: 'mine' }, progress: () => undefined });
  t.same(r.destroyed, ['cap-y']);
  t.notOk(s.engine.containers.has(SHARD), 'its shard serves nobody now, and goes');
  t.ok(s.engine.containers.has('cap-egress.0.capother'), 'the other deployment\'s shard stays');
  t.ok(s.engine.reachable('cap-x', 'cap-x-egress'), 'and serves x');
});
