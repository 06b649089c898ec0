/**
 * A live allowlist change racing a destroy and a create of the same sandbox id in another
 * controller process (`capybara-sandbox allow` beside the provider), on the real engine through
 * the real socket proxy, with the shared egress: the change read the earlier sandbox's
 * registration, and its write, landing after the sandbox was made again on the same subnet, must
 * not put the earlier sandbox's lifecycle id and allowlist back into the slot the new one is
 * served by (the shard would serve it as a later registration, and the check before a command,
 * which compares name, subnet and address, would take it for the new sandbox's own).
 */
import t from 'tap';
import pino from 'pino';
import { createDockerSandbox, type SandboxHandle } from '../../../controller/index.js';
import { SandboxLanes } from '../../../controller/sandbox/index.js';
import { changeAllowHosts } from '../../../controller/sandbox/allowlist-change.js';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';
import { heldRegistrationWrites } from '../../support/held-registration.js';

await fileNeeds(t, 'engine');

const SECOND_HOST = 'second.capybara.test';

t.test('a live change that read the earlier sandbox never writes over the one made again', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const provider = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared' },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'silent' }) },
  );
  const id = `${s.env.runId}-race`;
  const create = (allowHosts: string[]): Promise<SandboxHandle> => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts } });
  const status = async (h: SandboxHandle, url: string): Promise<string> => (await provider.exec(h, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${url}`)).stdout;
  const first = await create([UPSTREAM_HOST]);
  t.teardown(() => provider.destroy({ id: first.id }));
  t.equal(await status(first, `http://${UPSTREAM_HOST}/`), '200');

  // The other process: its registration write held until the sandbox was made again.
  const { engine, atWrite, release } = heldRegistrationWrites(s.proxy.endpoint);
  const change = changeAllowHosts(
    { engine, lanes: new SandboxLanes(), sharedNetwork: s.sharedNetwork, config: {}, ensureRunning: async () => undefined },
    first.id,
    { allow: [SECOND_HOST] },
  );
  change.catch(() => undefined);
  await atWrite;

  await provider.destroy(first);
  const again = await create([SECOND_HOST]);
  t.equal(await status(again, `http://${SECOND_HOST}/`), '200', 'the new sandbox, its own list');
  t.equal(await status(again, `http://${UPSTREAM_HOST}/`), '403', 'not the earlier one\'s');

  release();
  const outcome = await change.then(
    (list) => `applied ${JSON.stringify(list)}`,
    (err: Error & { code?: string }) => `refused ${err.code ?? ''}: ${err.message}`,
  );
  t.match(outcome, /^refused conflict/, `the stale change is refused: ${outcome}`);
  // Past the shard's reading of any write (within a second): never the earlier sandbox's list.
  await new Promise((r) => setTimeout(r, 1_500));
  t.not(await status(again, `http://${UPSTREAM_HOST}/`), '200', 'the earlier sandbox\'s host stays refused to the new one');
  // The next command of a controller process that has not read it lately writes its own back.
  const other = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared' },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'silent' }) },
  );
  const otherStatus = async (url: string): Promise<string> => (await other.exec(again, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${url}`)).stdout;
  t.equal(await otherStatus(`http://${SECOND_HOST}/`), '200', 'its own list');
  t.equal(await otherStatus(`http://${UPSTREAM_HOST}/`), '403', 'and nothing of the earlier one');
});
