/**
 * Warm network slots (`warmSlots`) on the real engine, through the real socket proxy and a real
 * shard of the shared egress:
 * - the pool is made ahead: internal networks a shard joined at their proxy address, nothing else
 *   on them;
 * - two sandboxes made at once each take one, and each reaches its own allowlist only, through its
 *   proxy variables (the proxy's address: a warm network's leg has no alias) and transparently;
 *   neither network holds anything but its sandbox and the shard;
 * - `inspect` and `ls` show the sandbox on its warm network, its proxy running;
 * - gc keeps the waiting ones and the ones in use;
 * - destroy removes the sandbox's warm network with it, and `down --all` the ones still waiting.
 * The in-memory engine covers the ordering and recovery: warm-networks.test.ts.
 */
import t from 'tap';
import pino from 'pino';
import { createDockerSandbox, type SandboxHandle } from '../../../controller/index.js';
import { DockerEngine } from '../../../controller/docker/index.js';
import { inspectSandbox } from '../../../controller/operator/sandbox-detail.js';
import { collectGarbage } from '../../../controller/operator/gc.js';
import { destroyAllSandboxes } from '../../../controller/operator/down-all.js';
import { readInventory, sandboxRows } from '../../../controller/operator/inventory.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runOperator } from '../../../controller/operator/index.js';
import { engineSocketPath } from '../../support/docker.js';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

const SECOND_HOST = 'second.capybara.test';

t.test('sandboxes made on warm networks', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const provider = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared', warmSlots: 2 },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'silent' }) },
  );
  const shard = `cap-egress.0.${s.sharedNetwork}`;
  const host = new DockerEngine({ endpoint: `unix://${engineSocketPath()}` });
  const warmNetworks = async (): Promise<Array<{ Name: string; Id: string }>> =>
    (await s.env.docker.listNetworks({ filters: { label: ['dev.capybara.sandbox.warm', ...Object.entries(s.env.labels).map(([k, v]) => `${k}=${v}`)] } })).map((n) => ({ Name: n.Name, Id: n.Id }));
  const membersOf = async (network: string): Promise<string[]> =>
    Object.values((await s.env.docker.getNetwork(network).inspect()).Containers ?? {}).map((c) => (c as { Name: string }).Name).sort();

  t.equal(await provider.warmUp(), 2, 'two ready');
  const waiting = await warmNetworks();
  t.equal(waiting.length, 2);
  for (const w of waiting) {
    const view = await s.env.docker.getNetwork(w.Id).inspect();
    t.equal(view.Internal, true, `${w.Name}: internal`);
    t.equal(view.Options?.['com.docker.network.bridge.inhibit_ipv4'], 'true', `${w.Name}: no host address`);
    t.same(await membersOf(w.Id), [shard], `${w.Name}: the shard alone on it`);
  }

  const id = (x: string): string => `${s.env.runId}-${x}`;
  const create = (x: string, allowHosts: string[]): Promise<SandboxHandle> => provider.create({ id: id(x), image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts } });
  const [a, b] = await Promise.all([create('a', [UPSTREAM_HOST]), create('b', [SECOND_HOST])]);
  const status = async (h: SandboxHandle, url: string, proxy = true): Promise<string> =>
    (await provider.exec(h, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${proxy ? '' : "--noproxy '*' "}${url}`)).stdout;

  await t.test('each takes a warm network, and reaches its own allowlist only', async (t) => {
    const onA = (await s.inspect(a.id)).Config.Labels['dev.capybara.sandbox.warm-network'] ?? '';
    const onB = (await s.inspect(b.id)).Config.Labels['dev.capybara.sandbox.warm-network'] ?? '';
    t.same([onA, onB].sort(), waiting.map((w) => w.Name).sort(), 'the two warm networks, one each');
    t.same(await s.env.docker.listNetworks({ filters: { name: [`${a.id}-net`] } }), [], 'no network of its own');
    t.same(await membersOf(onA), [a.id, shard].sort(), 'a\'s network holds a and the shard');
    t.same(await membersOf(onB), [b.id, shard].sort(), 'b\'s network holds b and the shard');
    const shardOnA = (await s.inspect(shard)).NetworkSettings.Networks[onA]?.IPAddress ?? '';
    t.match((await provider.exec(a, 'echo $HTTPS_PROXY')).stdout, `http://${shardOnA}:3128`, 'its proxy variables name the shard\'s address there');
    t.equal((await provider.exec(a, `curl -sS -m 10 http://${UPSTREAM_HOST}/`)).stdout, UPSTREAM_BODY);
    t.equal(await status(a, `http://${SECOND_HOST}/`), '403', 'b\'s host refused to a');
    t.equal(await status(b, `http://${SECOND_HOST}/`), '200');
    t.equal(await status(b, `http://${UPSTREAM_HOST}/`), '403', 'a\'s host refused to b');
    t.equal(await status(a, `http://${UPSTREAM_HOST}/`, false), '200', 'transparent: the shard answers a\'s DNS');
    t.equal(await status(b, `http://${UPSTREAM_HOST}/`, false), '000', 'and refuses the name to b');
  });

  await t.test('inspect and ls show it on its warm network; gc keeps what waits and what is in use', async (t) => {
    const detail = await inspectSandbox(new DockerEngine({ endpoint: s.proxy.endpoint }), a.id, s.sharedNetwork);
    t.match(detail, { network: /^cap-warm\./, egress: 'running', allowHosts: [UPSTREAM_HOST] });
    const rows = sandboxRows(await readInventory(host, s.env.labels, 'ls'), Date.now(), s.sharedNetwork);
    t.match(rows.find((r) => r.name === a.id), { state: 'running', egress: 'running' });
    await provider.warmUp();
    const results = await collectGarbage(host, { dryRun: true, minAgeMs: 0, extraLabels: s.env.labels, nowMs: Date.now() + 60_000, sharedNetwork: s.sharedNetwork });
    t.same(results.filter((r) => r.name.startsWith('cap-warm.')), [], `no warm network is an orphan: ${JSON.stringify(results)}`);
  });

  await t.test('destroy removes its warm network; down --all the waiting ones', async (t) => {
    const onA = (await s.inspect(a.id)).Config.Labels['dev.capybara.sandbox.warm-network'] ?? '';
    await provider.destroy(a);
    t.notOk((await warmNetworks()).some((w) => w.Name === onA), 'a\'s warm network went with it');
    t.notOk(Object.keys((await s.inspect(shard)).NetworkSettings.Networks).includes(onA), 'the shard\'s leg too');
    t.ok((await warmNetworks()).length >= 2, 'b\'s and the refilled ones remain');
    const down = await destroyAllSandboxes({ engine: host, provider, sharedNetwork: s.sharedNetwork, labels: s.env.labels, progress: () => undefined });
    t.same(down.destroyed, [b.id]);
    t.same(await warmNetworks(), [], 'no warm network left');
  });

  await t.test('the CLI keeps no warm network slot, whatever the config says', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cap-warm-cli-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const config = join(dir, 'config.json');
    writeFileSync(config, JSON.stringify({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared', warmSlots: 2 }));
    const labels = Object.entries(s.env.labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]);
    let stderr = '';
    const code = await runOperator(['--config', config, ...labels, 'create', id('cli'), '--allow', UPSTREAM_HOST], { stdout: () => undefined, stderr: (text) => (stderr += text) });
    t.equal(code, 0, stderr);
    t.teardown(() => provider.destroy({ id: `cap-${id('cli')}` }));
    // A refill would have started as the create ended.
    await new Promise((r) => setTimeout(r, 1_000));
    t.same(await warmNetworks(), [], 'none made after its create');
  });
});
