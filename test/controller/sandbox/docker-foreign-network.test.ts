/**
 * A sandbox connected to a network besides its own (`docker network connect`, here the shared
 * network its proxy is on) reached the shared network's gateway, and what is routed from it,
 * past its egress proxy: the check before a command looked only at whether the sandbox had a
 * network and its proxy a leg on the first one listed, and `ls` said `running` (review finding).
 * Now `ls` says `exposed`, and the next command first takes the other leg off. Real engine, real
 * socket proxy.
 */
import t from 'tap';
import pino from 'pino';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_HOST, UPSTREAM_BODY } from '../../support/sandbox-env.js';
import { engineSocketPath } from '../../support/docker.js';
import { fileNeeds } from '../../support/needs.js';
import { DockerEngine } from '../../../controller/docker/index.js';
import { readInventory, sandboxRows } from '../../../controller/operator/inventory.js';

await fileNeeds(t, 'engine');

t.test('a leg on another network is shown and taken off before the next command', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env, sharedNetwork, upstreamIp } = s;
  const h = await provider.create({ id: `${env.runId}-legs`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
  t.teardown(() => provider.destroy(h));
  // Straight to the upstream's address on the shared network's gateway, with no proxy.
  const direct = `curl -s -m 3 --noproxy '*' http://${upstreamIp}/; echo " rc=$?"`;
  t.match((await provider.exec(h, direct)).stdout, / rc=(7|28)\n$/, 'alone on its network, the sandbox cannot reach the upstream directly');

  await env.docker.getNetwork(sharedNetwork).connect({ Container: h.id });
  const engine = new DockerEngine({ endpoint: `unix://${engineSocketPath()}`, logger: pino({ level: 'silent' }) });
  const rows = sandboxRows(await readInventory(engine, env.labels, 'ls'), Date.now(), sharedNetwork);
  t.same(rows.map((r) => [r.name, r.egress]), [[h.id, 'exposed']], 'ls says exposed');

  const after = await provider.exec(h, direct);
  t.notMatch(after.stdout, UPSTREAM_BODY, 'the next command does not reach past the proxy');
  t.same(Object.keys((await s.inspect(h.id)).NetworkSettings.Networks), [`${h.id}-net`], 'the other leg is gone');
  t.match((await provider.exec(h, `curl -s -m 5 http://${UPSTREAM_HOST}/`)).stdout, UPSTREAM_BODY, 'and the proxy still serves its allowlist');
  const again = sandboxRows(await readInventory(engine, env.labels, 'ls'), Date.now(), sharedNetwork);
  t.same(again.map((r) => r.egress), ['running'], 'ls says running again');
});
