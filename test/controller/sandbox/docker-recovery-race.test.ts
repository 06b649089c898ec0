/**
 * A recovery (`resume`, the check before a command) in one controller process racing a destroy
 * and a create of the same sandbox id in another, on the real engine through the real socket
 * proxy, with the shared egress: the recovery found the registration missing and writes one from
 * the earlier sandbox's label; written after the sandbox was made again on the same subnet, it
 * must not stay in the new sandbox's slot (the shard would serve the new sandbox the earlier list,
 * and the check before a command, by name, subnet and address, would take it for its own). The
 * same for a recovery that rebuilds a missing proxy of the sandbox's own, whose registration goes
 * into a proxy of the same name.
 */
import t from 'tap';
import pino from 'pino';
import { createDockerSandbox, type SandboxHandle } from '../../../controller/index.js';
import { registrationArchive } from '../../../common/index.js';
import { DockerEngine } from '../../../controller/docker/index.js';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';
import { heldRegistrationWrites } from '../../support/held-registration.js';
import { EGRESS_SLOT } from '../../../controller/sandbox/egress-policy.js';

await fileNeeds(t, 'engine');
const SECOND_HOST = 'second.capybara.test';

t.test('a recovery that read the earlier sandbox never writes over the one made again', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const controller = (engine?: DockerEngine) => createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared' },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'silent' }), ...(engine ? { engine } : {}) },
  );
  const provider = controller();
  const id = `${s.env.runId}-rrace`;
  const create = (allowHosts: string[]): Promise<SandboxHandle> => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts } });
  const status = async (p: ReturnType<typeof controller>, h: SandboxHandle, url: string): Promise<string> => (await p.exec(h, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${url}`)).stdout;
  const first = await create([UPSTREAM_HOST]);
  t.teardown(() => provider.destroy({ id: first.id }));
  const shard = `cap-egress.0.${s.sharedNetwork}`;
  const subnet = (await s.env.docker.getNetwork(`${first.id}-net`).inspect()).IPAM?.Config?.[0]?.Subnet ?? '';
  await new DockerEngine({ endpoint: s.proxy.endpoint }).putRegistration(shard, registrationArchive(subnet.replace('/', '_'), { version: 1, vacant: true }));

  const { engine, atWrite, release } = heldRegistrationWrites(s.proxy.endpoint);
  const other = controller(engine);
  const resumed = other.resume(first).then((r) => `resumed ${r}`, (err: Error & { code?: string }) => `refused ${err.code ?? ''}: ${err.message}`);
  await atWrite;
  await provider.destroy(first);
  const again = await create([SECOND_HOST]);
  t.equal(await status(provider, again, `http://${UPSTREAM_HOST}/`), '403', 'not the earlier one\'s');
  release();
  const outcome = await resumed;
  t.match(outcome, /^refused conflict/, `the stale recovery is refused: ${outcome}`);
  await new Promise((r) => setTimeout(r, 1_500));
  t.not(await status(provider, again, `http://${UPSTREAM_HOST}/`), '200', 'the earlier sandbox\'s host stays refused to the new one');
  const third = controller();
  t.equal(await status(third, again, `http://${SECOND_HOST}/`), '200', 'its own list');
  t.equal(await status(third, again, `http://${UPSTREAM_HOST}/`), '403', 'and nothing of the earlier one');
});

t.test('a recovery that rebuilds a missing proxy of the sandbox\'s own never writes into the one made again', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const controller = (engine?: DockerEngine) => createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'sandbox' },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'silent' }), ...(engine ? { engine } : {}) },
  );
  const provider = controller();
  const id = `${s.env.runId}-orace`;
  const create = (allowHosts: string[]): Promise<SandboxHandle> => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts } });
  const status = async (p: ReturnType<typeof controller>, h: SandboxHandle, url: string): Promise<string> => (await p.exec(h, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${url}`)).stdout;
  const first = await create([UPSTREAM_HOST]);
  t.teardown(() => provider.destroy({ id: first.id }));
  // Its registration lost, then its proxy gone: the recovery rebuilds the proxy, and writes the
  // registration from the label.
  await new DockerEngine({ endpoint: s.proxy.endpoint }).putRegistration(`${first.id}-egress`, registrationArchive(EGRESS_SLOT, { version: 1, vacant: true }));
  await s.env.docker.getContainer(`${first.id}-egress`).remove({ force: true });

  const { engine, atWrite, release } = heldRegistrationWrites(s.proxy.endpoint);
  const other = controller(engine);
  const resumed = other.resume(first).then((r) => `resumed ${r}`, (err: Error & { code?: string }) => `refused ${err.code ?? ''}: ${err.message}`);
  const reached = await Promise.race([atWrite.then(() => 'write'), resumed]);
  t.equal(reached, 'write', 'the rebuild reached its registration write');
  await provider.destroy(first);
  const again = await create([SECOND_HOST]);
  release();
  const outcome = await resumed;
  t.match(outcome, /^refused conflict/, `the stale recovery is refused: ${outcome}`);
  await new Promise((r) => setTimeout(r, 1_500));
  t.not(await status(provider, again, `http://${UPSTREAM_HOST}/`), '200', 'the earlier sandbox\'s host stays refused to the new one');
});
