/**
 * Every Docker call the controller can make, made by the controller's own engine layer
 * (controller/docker/engine.ts) with the bodies its own pure builders produce (sandbox-plan.ts,
 * container-spec.ts, network-spec.ts, volume-spec.ts), through the real socket proxy in front of
 * the real engine. Nothing here is a hand-copied request: when the controller changes a request
 * shape the proxy refuses, a row fails; when the engine layer grows a method, the test fails until
 * a row calls it through the proxy. The operator's listing calls must be refused (by design).
 * Then every body the controller builds for every tier, option and recovery path
 * (controller-bodies.ts) goes through the same proxy: none may be refused.
 */
import t from 'tap';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE } from '../support/docker.js';
import { DockerEngine, engineStatus } from '../../controller/docker/engine.js';
import { parseDeploymentConfig } from '../../controller/spec/config.js';
import { planSandbox } from '../../controller/spec/sandbox-plan.js';
import { egressContainerBody, handoverContainerBody, sandboxContainerBody } from '../../controller/docker/container-spec.js';
import { internalNetworkBody, sharedNetworkBody } from '../../controller/docker/network-spec.js';
import { parseAddressPool, sandboxSubnet, subnetSlots } from '../../controller/spec/address-pool.js';
import { volumeBody } from '../../controller/docker/volume-spec.js';
import { SANDBOX_USER } from '../../controller/exec/exec-script.js';
import { isSandboxError } from '../../controller/spec/errors.js';
import { IMAGES, registrationArchive } from '../../common/index.js';
import { egressRegistration } from '../../controller/docker/registration-spec.js';
import { controllerBodies, TEST_VOLUME_DRIVER, type BodyRoute } from './controller-bodies.js';
import { send } from './raw-http.js';
import { fileNeeds, needUnmet } from '../support/needs.js';
import { loopbackName, loopbackNameProblem } from '../support/loopback-name.js';

await fileNeeds(t, 'engine');

const SANDBOX_IMAGE = IMAGES.sandbox;
const EGRESS_IMAGE = IMAGES.egress;

t.test('the controller engine layer through the socket proxy', async (t) => {
  const env = await dockerTest(t, [SANDBOX_IMAGE, EGRESS_IMAGE, SOCKET_PROXY_IMAGE]);
  if (!env) return;
  // The deployment's shared network: starts "cap" but not "cap-", so only the proxy's exact-name
  // rule for SOCKET_PROXY_SHARED_NETWORK admits it.
  const shared = `capshared${env.runId}`;
  const noRoot = loopbackNameProblem();
  if (noRoot !== undefined) return needUnmet(t, noRoot);
  // A listed registry that resolves to a closed loopback port: pulls from it reach dockerd, which fails them.
  const registry = `${await loopbackName(t, env.runId)}:9`;
  const proxy = await startSocketProxy(t, env, { sharedNetwork: shared, volumeDrivers: TEST_VOLUME_DRIVER, registries: registry });
  const engine = new DockerEngine({ endpoint: proxy.endpoint });
  const config = parseDeploymentConfig({ endpoint: proxy.endpoint, network: shared });
  // On a persistent workspace (its key carries the run id, for the clean-up), so that the sandbox
  // carries the label its holders are listed by.
  const plan = planSandbox(
    {
      id: `${env.runId}-calls`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: ['example.com'], memoryMb: 256 },
      workspace: { key: `calls-${env.runId}`, durability: 'persistent' },
    },
    config,
    { extraLabels: env.labels },
  );
  const { names } = plan;
  // A subnet of the default pool, as a create picks it (a later candidate when one is taken).
  const pool = parseAddressPool(config.addressPool, config.subnetPrefix);
  const slots = subnetSlots(pool, names.network);
  const ids = { shared: '', sandbox: '' };
  let addresses = sandboxSubnet(pool, slots.next().value ?? 0);

  // Each row is one method of DockerEngine, called as the controller calls it.
  const rows: Array<{ method: string; run: () => Promise<unknown> }> = [
    { method: 'ping', run: () => engine.ping() },
    { method: 'imageExists', run: async () => t.equal(await engine.imageExists(SANDBOX_IMAGE), true) },
    {
      method: 'pullImage',
      // Forwarded to Docker, which fails it itself (the registry is a closed loopback port).
      run: async () => {
        const err = await engine.pullImage(`${registry}/capybara-none:1`).then(() => undefined, (e: unknown) => e);
        t.ok(isSandboxError(err, 'image_unavailable') || (isSandboxError(err) && engineStatus(err) !== 403), `Docker, not the proxy, failed the pull: ${String(err)}`);
        t.notMatch(String(err), /connection refused|dial tcp/, 'what dockerd met on the way is not passed back');
      },
    },
    { method: 'createNetwork', run: async () => {
      ids.shared = await engine.createNetwork(sharedNetworkBody(shared, env.labels));
      for (;;) {
        try {
          ids.sandbox = await engine.createNetwork(internalNetworkBody(names.network, plan.labels, addresses));
          break;
        } catch (err) {
          if (!/overlaps/.test(String(err))) throw err;
          addresses = sandboxSubnet(pool, slots.next().value ?? 0);
        }
      }
    } },
    { method: 'inspectNetwork', run: async () => {
      t.match(await engine.inspectNetwork(ids.sandbox), { internal: true, name: names.network, subnets: [addresses.subnet] }, 'a sandbox network by id');
      t.match(await engine.inspectNetwork(shared), { id: ids.shared }, 'the shared network by name');
      t.equal(await engine.inspectNetwork('f'.repeat(64)), undefined, 'a missing id is a 404, as from dockerd');
    } },
    { method: 'listNetworks', run: async () => {
      t.same((await engine.listNetworks([`dev.capybara.sandbox.name=${names.name}`])).map((n) => n.id), [ids.sandbox], 'by the sandbox name label');
      t.same((await engine.listNetworks([`dev.capybara.sandbox.shared-network=${shared}`])).map((n) => n.id), [ids.shared], 'by the shared network label');
    } },
    { method: 'createVolume', run: async () => {
      await engine.createVolume(volumeBody(plan.workspaceVolume, plan.labels, undefined, undefined));
      await engine.createVolume(volumeBody(names.skillsVolume, plan.labels, undefined, undefined));
      await engine.createVolume(volumeBody(names.egressPolicyVolume, plan.labels, undefined, undefined));
    } },
    { method: 'inspectVolume', run: async () => t.equal((await engine.inspectVolume(plan.workspaceVolume))?.driver, 'local') },
    { method: 'createContainer', run: async () => {
      await engine.createContainer(names.container, sandboxContainerBody(plan, ids.sandbox));
      // As build-steps.ts makes it: its policy a registration in its own volume.
      await engine.createContainer(names.egress, egressContainerBody(plan, ids.shared, undefined, addresses.egressAddress, 'enforce', names.egressPolicyVolume));
      // As sandbox/workspace-handover.ts makes it: the workspace its one mount point.
      await engine.createContainer(names.handover, handoverContainerBody(plan.image, plan.workspaceVolume, plan.labels, plan.logCaps));
    } },
    { method: 'giveWorkspaceToSandboxUser', run: async () => {
      const err = await engine.giveWorkspaceToSandboxUser(names.container).then(() => undefined, (e: unknown) => e);
      t.match(String(err), /archive_mount_not_allowed/, 'never into the sandbox container itself (three mount points)');
      await engine.giveWorkspaceToSandboxUser(names.handover);
      await engine.removeContainer(names.handover);
    } },
    { method: 'putRegistration', run: () => engine.putRegistration(names.egress, registrationArchive('sandbox', egressRegistration(names, { subnet: addresses.subnet, address: addresses.egressAddress }, plan.allowHosts, 'enforce'))) },
    { method: 'connectNetwork', run: () => engine.connectNetwork(ids.sandbox, names.egress, addresses.egressAddress) },
    { method: 'startContainer', run: async () => {
      await engine.startContainer(names.container);
      await engine.startContainer(names.egress);
    } },
    { method: 'inspectContainer', run: async () => {
      t.match(await engine.inspectContainer(names.container), { running: true, paused: false, networks: [{ id: ids.sandbox }] });
      const proxyNetworks = (await engine.inspectContainer(names.egress))?.networks ?? [];
      t.same(proxyNetworks.map((n) => `${n.id}${n.id === ids.sandbox ? ` ${n.ipv4}` : ''}`).sort(), [ids.shared, `${ids.sandbox} ${addresses.egressAddress}`].sort(), 'the proxy on both, at its fixed address');
    } },
    { method: 'disconnectNetwork', run: async () => {
      // As a shard's leg goes (forced), and comes back as a shard's does: at the fixed address,
      // with the sandbox's egress proxy name as its alias there.
      await engine.disconnectNetwork(ids.sandbox, names.egress);
      t.same((await engine.inspectContainer(names.egress))?.networks.map((n) => n.id), [ids.shared], 'the proxy off the sandbox network');
      await engine.connectNetwork(ids.sandbox, names.egress, addresses.egressAddress, names.egress);
      const leg = (await env.docker.getContainer(names.egress).inspect()).NetworkSettings.Networks[names.network];
      t.same([leg?.IPAddress, leg?.Aliases?.includes(names.egress)], [addresses.egressAddress, true], 'back at its fixed address, with the alias');
    } },
    {
      method: 'startExec',
      run: async () => {
        let stdout = '';
        const run = await engine.startExec(names.container, { cmd: ['bash', '-c', 'cat; id -u; stat -c %u /workspace'], user: SANDBOX_USER, stdin: Buffer.from('in '), onOutput: (_s, c) => (stdout += c.toString()) });
        t.same([await run.finished, stdout], [0, 'in 1000\n1000\n'], 'stdin in, stdout out, exit code; the workspace is the sandbox user\'s');
      },
    },
    { method: 'listRunningContainers', run: async () => {
      t.same((await engine.listRunningContainers([`dev.capybara.sandbox.workspace=calls-${env.runId}`])).map((c) => c.name), [names.container], 'the holder of the workspace');
    } },
    { method: 'restartContainer', run: () => engine.restartContainer(names.container) },
    {
      method: 'unpauseContainer',
      // Pausing is not a controller call; the engine itself does it here.
      run: async () => {
        await env.docker.getContainer(names.container).pause();
        await engine.unpauseContainer(names.container);
        // dockerd applies containerd's pause and resume events after its own answer, so a late
        // pause event can show the container paused for a moment after the unpause: wait for
        // the resume, with a deadline.
        const end = Date.now() + 5_000;
        while ((await engine.inspectContainer(names.container))?.paused !== false && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
        t.match(await engine.inspectContainer(names.container), { paused: false });
      },
    },
    { method: 'stopContainer', run: () => engine.stopContainer(names.container, 1) },
    { method: 'removeContainer', run: async () => {
      await engine.removeContainer(names.container);
      await engine.removeContainer(names.egress);
      t.equal(await engine.inspectContainer(names.container), undefined);
    } },
    { method: 'removeNetwork', run: async () => {
      await engine.removeNetwork(ids.sandbox);
      await engine.removeNetwork(shared);
      await engine.removeNetwork(ids.sandbox);
    } },
    { method: 'removeVolume', run: async () => {
      await engine.removeVolume(plan.workspaceVolume);
      await engine.removeVolume(names.skillsVolume);
      t.equal(await engine.inspectVolume(plan.workspaceVolume), undefined);
    } },
    // A container's log is not the controller's to read: the operator's logs reads it from the
    // engine itself, and the proxy refuses it.
    { method: 'readLogs', run: async () => {
      const err = await engine.readLogs(names.egress, { follow: false, onOutput: () => undefined }).then(() => undefined, (e: unknown) => e);
      t.equal(engineStatus(err), 403, 'readLogs is refused by the socket proxy');
    } },
    // The operator's listing works only against the engine itself: the proxy refuses it (networks
    // are listed through it only by one exact label).
    ...(['listContainers', 'listNetworks', 'listVolumes'] as const).map((method) => ({
      method,
      run: async () => {
        const err = await engine[method]([`dev.capybara.test=${env.runId}`]).then(() => undefined, (e: unknown) => e);
        t.equal(engineStatus(err), 403, `${method} is refused by the socket proxy`);
      },
    })),
    { method: 'containersOnNetwork', run: async () => {
      const err = await engine.containersOnNetwork({ id: names.network, name: names.network }).then(() => undefined, (e: unknown) => e);
      t.equal(engineStatus(err), 403, 'containersOnNetwork is refused by the socket proxy');
    } },
  ];

  const methods = Object.getOwnPropertyNames(DockerEngine.prototype).filter((m) => m !== 'constructor' && !m.startsWith('call') && !['optional', 'callTimeoutMs'].includes(m));
  t.same([...new Set(rows.map((r) => r.method))].sort(), methods.sort(), 'every method of the engine layer has a row here');

  for (const row of rows) {
    try {
      await row.run();
      t.pass(`${row.method} passes the socket proxy`);
    } catch (err) {
      t.fail(`${row.method}: ${String(err)}`);
    }
  }

  // The proxy's own log: only the archive into the sandbox container, the log read and the listing calls were refused. HAProxy writes its log lines a moment
  // after the answers, so wait (with a deadline) until the last call's line is there.
  // A network id that names nothing is answered 404 by the proxy itself, as dockerd would.
  const deniedLines = async (): Promise<string[]> => (await proxy.logs()).split('\n').filter((line) => /deny=\S/.test(line) && !/deny=-/.test(line) && !/deny=network_not_found/.test(line));
  let denied = await deniedLines();
  for (const deadline = Date.now() + 10_000; denied.length < 6 && Date.now() < deadline; denied = await deniedLines()) {
    await new Promise((r) => setTimeout(r, 50));
  }
  t.same(
    denied.map((line) => /(GET|POST|PUT|DELETE|HEAD) (\S+)/.exec(line)?.[2]?.replace(/\?.*/, '')),
    [`/containers/${names.container}/archive`, `/containers/${names.egress}/logs`, '/containers/json', '/networks', '/volumes', '/containers/json'],
    'the proxy refused nothing but the archive into the sandbox container itself, the log and listing',
  );
});

t.test('every body the controller builds passes the socket proxy', async (t) => {
  const env = await dockerTest(t, [SANDBOX_IMAGE, EGRESS_IMAGE, SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const shared = `capshared${env.runId}b`;
  const proxy = await startSocketProxy(t, env, { sharedNetwork: shared, volumeDrivers: TEST_VOLUME_DRIVER });
  // The networks the bodies name by id: a sandbox network and the shared one, as the proxy proves them.
  const sharedId = (await env.docker.createNetwork({ Name: shared, CheckDuplicate: true, Labels: env.labels })).id;
  const sandboxId = (await env.docker.createNetwork({ Name: env.name('bodies-net'), CheckDuplicate: true, Internal: true, Labels: env.labels })).id;
  const bodies = controllerBodies(shared, env.labels, `${env.runId}-b`, { shared: sharedId, sandbox: sandboxId });
  // Where each call goes. Docker may answer an error of its own (a network or container that does
  // not exist here, a runtime not installed): only the proxy's answer is judged. Networks are
  // created once per kind (each takes an address pool of the engine); a volume of the test
  // plugin is judged by the check alone (dockerd would spend 15 s looking for the plugin).
  const paths: Record<BodyRoute, (i: number) => string> = {
    container_create: (i) => `/v1.41/containers/create?name=${env.name(`b${i}`)}`,
    volume_create: () => '/v1.41/volumes/create',
    network_create: () => '/v1.41/networks/create',
    network_connect: () => `/v1.41/networks/${env.name('nosuchnet')}/connect`,
    network_disconnect: () => `/v1.41/networks/${env.name('nosuchnet')}/disconnect`,
    exec_create: () => `/v1.41/containers/${env.name('nosuch')}/exec`,
    exec_start: () => `/v1.41/exec/${'0'.repeat(64)}/start`,
  };
  const networkKinds = new Set<string>();
  const calls = bodies.filter((b) => {
    if (b.route === 'volume_create' && JSON.stringify(b.body).includes(TEST_VOLUME_DRIVER)) return false;
    if (b.route !== 'network_create') return true;
    const kind = JSON.stringify((b.body as { Options: unknown }).Options);
    if (networkKinds.has(kind)) return false;
    networkKinds.add(kind);
    return true;
  });
  t.ok(calls.length > 150, `${calls.length} of ${bodies.length} bodies sent to the engine`);
  const refused: string[] = [];
  for (let at = 0; at < calls.length; at += 8) {
    await Promise.all(calls.slice(at, at + 8).map(async (b, k) => {
      const res = await send(proxy.socketPath, {
        method: 'POST', path: paths[b.route](at + k), headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(b.body),
      });
      const denied = res.headers['x-socket-proxy-deny'];
      if (denied !== undefined || res.headers['api-version'] === undefined) refused.push(`${b.route} ${b.what}: ${String(denied ?? res.status)}`);
    }));
  }
  t.same(refused, [], 'the proxy refused none of them; Docker answered each');
});
