/**
 * The lifecycle of a sandbox served by a shard of the shared egress (`egressIsolation: shared`,
 * the default), on the real engine through the real socket proxy: what docker-sandbox.test.ts
 * checks for a sandbox with a proxy of its own, with a shard in its place.
 * - Suspend stops the sandbox and not the shard (another sandbox is still served); resume keeps
 *   files, ends processes, and the sandbox's egress works again with its policy.
 * - A command auto-starts a stopped or paused sandbox container, and brings back a shard that was
 *   stopped, paused, killed or removed (made again from its volume, which keeps a live change;
 *   another sandbox on it gets its leg back at its own next command).
 * - egressUsage is the sandbox's own share of the shard's counts; null while the shard is paused.
 * - Resume after the sandbox's network was removed (with the shard's leg taken off first, or while
 *   the shard was stopped, as `docker network prune` does to a stopped container's networks), and
 *   commands after everything stopped and every sandbox network was removed.
 * - A destroy called while a resume rebuilds waits for it and leaves nothing; destroy leaves
 *   nothing labelled with the sandbox and no leg or registration on the shard (stopped or paused
 *   meanwhile too), which stays.
 */
import t from 'tap';
import pino from 'pino';
import { execFileSync } from 'node:child_process';
import { createDockerSandbox, type SandboxHandle } from '../../../controller/index.js';
import { TENANTS_DIR } from '../../../common/index.js';
import { autoStarts, rejectsCode, untilInSandbox } from '../../support/sandbox-asserts.js';
import { captureLogs } from '../../support/log-capture.js';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

const SECOND_HOST = 'second.capybara.test';
const docker = (...args: string[]): string => execFileSync('docker', args, { encoding: 'utf8' }).trim();

t.test('a sandbox\'s lifecycle on a shard of the shared egress', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { logs, sink } = captureLogs();
  const provider = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared' },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'warn' }, sink) },
  );
  const shard = `cap-egress.0.${s.sharedNetwork}`;
  const name = `cap-${s.env.runId}-main`;
  const h: SandboxHandle = { id: name };
  let b: SandboxHandle = { id: `cap-${s.env.runId}-b` };
  t.teardown(() => Promise.all([provider.destroy(h), provider.destroy(b)]));

  const status = async (x: SandboxHandle, url: string): Promise<string> => (await provider.exec(x, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${url}`)).stdout;
  const fetchBody = async (x: SandboxHandle): Promise<string> => {
    const r = await provider.exec(x, `curl -sS -m 10 http://${UPSTREAM_HOST}/`);
    return r.stdout === UPSTREAM_BODY ? r.stdout : `${r.stdout}${r.stderr}`;
  };
  const networksOf = async (container: string): Promise<string[]> => Object.keys((await s.inspect(container)).NetworkSettings.Networks).sort();
  const members = async (network: string): Promise<string[]> =>
    Object.values((await s.env.docker.getNetwork(network).inspect()).Containers ?? {}).map((c) => (c as { Name: string }).Name).sort();
  const subnetOf = async (network: string): Promise<string> => (await s.env.docker.getNetwork(network).inspect()).IPAM?.Config?.[0]?.Subnet ?? '';
  /** The registration file of a subnet's slot, as the shard holds it. */
  const slotText = (subnet: string): string => docker('exec', '-u', 'egress', shard, 'cat', `${TENANTS_DIR}/${subnet.replace('/', '_')}.json`);

  await t.test('created on the shard, with no proxy of its own', async (t) => {
    await provider.create({ id: `${s.env.runId}-main`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
    b = await provider.create({ id: `${s.env.runId}-b`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
    t.same(await s.labelled(`${name}-egress`), [], 'no egress container of its own');
    t.same(await members(`${name}-net`), [name, shard].sort(), 'its network holds the sandbox and the shard');
    t.equal(await fetchBody(h), UPSTREAM_BODY);
    t.equal(await status(h, `http://${SECOND_HOST}/`), '403', 'another host refused');
    t.equal(await fetchBody(b), UPSTREAM_BODY);
  });

  await t.test('suspend stops the sandbox, not the shard; resume keeps files, ends processes, and the egress works', async (t) => {
    await provider.exec(h, 'echo kept > /workspace/kept; echo gone > /tmp/gone');
    t.equal((await provider.exec(h, 'nohup sleep 1099 >/dev/null 2>&1 & echo started', { tag: 'bg' })).stdout, 'started\n');
    await provider.suspend(h);
    t.equal((await s.inspect(name)).State.Running, false, 'the sandbox is stopped');
    t.equal((await s.inspect(shard)).State.Running, true, 'the shard runs on');
    t.equal(await fetchBody(b), UPSTREAM_BODY, 'and serves the other sandbox meanwhile');
    t.equal(await provider.resume(h), 'running');
    t.equal((await provider.exec(h, 'cat /workspace/kept; ls /tmp/gone 2>/dev/null || echo cleared; pgrep -c -f "sleep 10[9]9" || true')).stdout, 'kept\ncleared\n0\n');
    t.equal(await fetchBody(h), UPSTREAM_BODY, 'the egress works after resume');
    t.equal(await status(h, `http://${SECOND_HOST}/`), '403', 'with its policy');
    t.same(await members(`${name}-net`), [name, shard].sort());
  });

  await t.test('auto-start after docker stop and docker pause of the sandbox', async (t) => {
    await autoStarts(t, provider, h, docker);
    t.equal(await fetchBody(h), UPSTREAM_BODY, 'the egress works after the auto-start');
  });

  await t.test('a stopped, paused, killed or removed shard is brought back before a command', async (t) => {
    docker('stop', '-t', '0', shard);
    t.equal(await fetchBody(h), UPSTREAM_BODY, 'stopped: started again');
    docker('pause', shard);
    t.equal(await fetchBody(h), UPSTREAM_BODY, 'paused: unpaused');
    t.equal((await s.inspect(shard)).State.Paused, false);
    docker('kill', shard);
    // A kill is a manual stop to dockerd, which does not restart the shard then; should one
    // (another engine version) restart it, the command is let wait for the shard to listen.
    await new Promise((r) => setTimeout(r, 500));
    if ((await s.inspect(shard)).State.Running) {
      const from = Date.now();
      while ((await fetchBody(h)) !== UPSTREAM_BODY && Date.now() - from < 15_000);
    }
    t.equal(await fetchBody(h), UPSTREAM_BODY, 'killed: running again');
    // A live change lives in the shard's volume: a shard made again from it keeps the change.
    t.same(await provider.changeAllowHosts(h, { allow: [SECOND_HOST] }), [UPSTREAM_HOST, SECOND_HOST]);
    await untilInSandbox(provider, h, `curl -sf -m 5 -o /dev/null http://${SECOND_HOST}/`);
    const before = (await s.inspect(shard)).Id;
    docker('rm', '-f', shard);
    t.equal(await fetchBody(h), UPSTREAM_BODY, 'removed: made again');
    t.not((await s.inspect(shard)).Id, before, 'a new shard container');
    t.equal(await status(h, `http://${SECOND_HOST}/`), '200', 'the live change kept in its volume');
    t.equal(await fetchBody(b), UPSTREAM_BODY, 'the other sandbox gets its leg back at its own next command');
    t.equal(await status(b, `http://${SECOND_HOST}/`), '403', 'with its own policy');
    t.same(await networksOf(shard), [`${b.id}-net`, `${name}-net`, s.sharedNetwork].sort());
    t.same(await provider.changeAllowHosts(h, { deny: [SECOND_HOST] }), [UPSTREAM_HOST]);
  });

  await t.test('egress usage is the sandbox\'s own share of the shard\'s counts', async (t) => {
    const [before, beforeB] = await Promise.all([provider.egressUsage(h), provider.egressUsage(b)]);
    if (before === null || beforeB === null) return t.fail(`a sandbox on a running shard has usage: ${JSON.stringify([before, beforeB])}`);
    const r = await provider.exec(h, `curl -sS -m 10 http://${UPSTREAM_HOST}/; curl -s -o /dev/null -m 10 http://not-allowed.example/`);
    t.equal(r.exitCode, 0, r.stderr);
    const [after, afterB] = await Promise.all([provider.egressUsage(h), provider.egressUsage(b)]);
    if (after === null || afterB === null) return t.fail('usage after');
    t.ok(after.bytesDown >= before.bytesDown + UPSTREAM_BODY.length, `bytes down grew by the body (${before.bytesDown} -> ${after.bytesDown})`);
    t.ok(after.bytesUp > before.bytesUp, 'bytes up grew');
    t.equal(after.allowed, before.allowed + 1);
    t.equal(after.deniedByReason.host_not_allowed ?? 0, (before.deniedByReason.host_not_allowed ?? 0) + 1);
    t.same(afterB, beforeB, 'the other sandbox\'s usage did not move');
    t.equal(await provider.egressUsage({ id: `${name}x` }), null, 'no sandbox, no usage');
    docker('pause', shard);
    try {
      const paused = await Promise.race([provider.egressUsage(h), new Promise((r) => setTimeout(() => r('hung'), 20_000).unref())]);
      t.equal(paused, null, 'a paused shard reports no usage');
    } finally {
      docker('unpause', shard);
    }
  });

  await t.test('resume after its network was removed (the shard\'s leg taken off first)', async (t) => {
    await provider.suspend(h);
    docker('network', 'disconnect', '-f', `${name}-net`, shard);
    docker('network', 'rm', `${name}-net`);
    t.equal(await provider.resume(h), 'running');
    t.same(await members(`${name}-net`), [name, shard].sort(), 'a network made again, with the shard on it');
    t.equal(await fetchBody(h), UPSTREAM_BODY);
    t.equal(await status(h, `http://${SECOND_HOST}/`), '403', 'with its policy');
  });

  await t.test('resume after its network was removed while the shard was stopped', async (t) => {
    // A stopped container keeps its networks in its settings but holds no endpoint on them, so
    // `docker network rm` (and `docker network prune`) remove them under it.
    await provider.suspend(h);
    docker('stop', '-t', '0', shard);
    docker('network', 'rm', `${name}-net`);
    t.equal(await fetchBody(b), UPSTREAM_BODY, 'the other sandbox\'s command brings the shard back');
    t.equal(await provider.resume(h), 'running');
    t.same(await members(`${name}-net`), [name, shard].sort());
    t.equal(await fetchBody(h), UPSTREAM_BODY);
    t.equal(await status(h, `http://${SECOND_HOST}/`), '403', 'with its policy');
  });

  await t.test('everything stopped (a host restart) and the sandbox networks pruned: each sandbox comes back at its next command', async (t) => {
    docker('stop', '-t', '0', name, b.id, shard);
    docker('network', 'rm', `${name}-net`, `${b.id}-net`);
    const [bodyA, bodyB] = await Promise.all([fetchBody(h), fetchBody(b)]);
    t.same([bodyA, bodyB], [UPSTREAM_BODY, UPSTREAM_BODY], 'both served, on networks made again');
    t.equal((await provider.exec(h, 'cat /workspace/kept')).stdout, 'kept\n', 'files kept');
    t.same(await networksOf(shard), [`${b.id}-net`, `${name}-net`, s.sharedNetwork].sort());
  });

  await t.test('a destroy called while a resume rebuilds waits for it, and leaves nothing', async (t) => {
    await provider.suspend(h);
    const subnet = await subnetOf(`${name}-net`);
    docker('network', 'disconnect', '-f', `${name}-net`, shard);
    docker('network', 'rm', `${name}-net`);
    const [resumed] = await Promise.all([provider.resume(h), provider.destroy(h)]);
    t.equal(resumed, 'running', 'the resume, called first, ran to its end');
    t.same(await s.labelled(name), [], 'the destroy, called second, removed what the resume rebuilt');
    t.same(await networksOf(shard), [`${b.id}-net`, s.sharedNetwork].sort(), 'the shard has no leg left for it');
    t.match(slotText(subnet), /"vacant":true/, 'its registration ended');
    t.equal(await fetchBody(b), UPSTREAM_BODY, 'the other sandbox is still served');
  });

  await t.test('a destroy while the shard is stopped or paused still ends its registration and takes its leg off', async (t) => {
    for (const how of ['stop', 'pause'] as const) {
      const c = await provider.create({ id: `${s.env.runId}-${how}`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
      const subnet = await subnetOf(`${c.id}-net`);
      if (how === 'stop') docker('stop', '-t', '0', shard);
      else docker('pause', shard);
      await provider.destroy(c);
      t.same(await s.labelled(c.id), [], `${how}: nothing of it left`);
      t.same(await networksOf(shard), [`${b.id}-net`, s.sharedNetwork].sort(), `${how}: no leg left for it`);
      t.equal(await fetchBody(b), UPSTREAM_BODY, `${how}: the other sandbox's command brings the shard back`);
      t.match(slotText(subnet), /"vacant":true/, `${how}: its registration ended`);
    }
  });

  await t.test('destroy leaves nothing labelled, twice; the shard stays', async (t) => {
    const subnet = await subnetOf(`${b.id}-net`);
    await provider.destroy(b);
    t.same(await s.labelled(b.id), []);
    const view = await s.inspect(shard);
    t.equal(view.State.Running, true, 'the shard runs on');
    t.same(Object.keys(view.NetworkSettings.Networks), [s.sharedNetwork], 'with no sandbox leg');
    t.match(slotText(subnet), /"vacant":true/, 'the registration ended');
    await provider.destroy(b);
    await provider.destroyByName(b.id);
    t.equal(await provider.resume(b), 'gone');
    await rejectsCode(t, provider.exec(b, 'true'), 'not_found');
    t.equal((await s.inspect(shard)).State.Running, true, 'still there');
  });

  t.comment(`controller warnings: ${JSON.stringify(logs.map((l) => l.msg))}`);
});
