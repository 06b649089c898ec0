/**
 * deploy/compose.yaml started for real with docker-compose: the stand-in host loads the plugin
 * through plugin.json, creates and removes a sandbox through the socket proxy and turns healthy;
 * the operator CLI in the same container runs a command in an allowlist sandbox (the refusal of
 * an unlisted host included) and doctor passes every check through the proxy's tcp endpoint on
 * the internal network. The file is used as shipped; only the project name and the shared
 * network carry this run's id.
 */
import t from 'tap';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { dockerTest, SOCKET_PROXY_IMAGE, TEST_LABEL } from '../support/docker.js';
import { composeProject } from './compose-cli.js';
import { IMAGES as PRODUCT_IMAGES } from '../../common/index.js';
import { fileNeeds } from '../support/needs.js';
import { networkInterfaces } from 'node:os';

await fileNeeds(t, 'engine');

const root = fileURLToPath(new URL('../..', import.meta.url));
const IMAGES = [PRODUCT_IMAGES.sandbox, PRODUCT_IMAGES.egress, SOCKET_PROXY_IMAGE, PRODUCT_IMAGES.cli];

/** Whether dotted-decimal `address` lies in the IPv4 CIDR block `subnet`. */
function inSubnet(address: string, subnet: string): boolean {
  const toInt = (a: string): number => a.split('.').reduce((n, o) => n * 256 + Number(o), 0);
  const [base, bits] = subnet.split('/');
  const size = 2 ** (32 - Number(bits));
  return Math.floor(toInt(address) / size) === Math.floor(toInt(base as string) / size);
}

async function healthOf(docker: Docker, id: string): Promise<string> {
  const info = await docker.getContainer(id).inspect();
  return info.State.Health?.Status ?? info.State.Status;
}

t.test('the compose deployment starts and serves sandboxes', async (t) => {
  const env = await dockerTest(t, IMAGES);
  if (!env) return;
  const shared = env.name('shared');
  const project = composeProject(t, `deploy-${env.runId}`, [join(root, 'deploy/compose.yaml')], { CAPYBARA_SANDBOX_NETWORK: shared, CAPYBARA_PROXY_IMAGE: SOCKET_PROXY_IMAGE });
  if (!project) return;

  const started = Date.now();
  const up = await project.run(['up', '-d']);
  t.equal(up.code, 0, up.stderr);
  const host = await project.id('capybara');
  // The stub's own check sandbox is named after its container; remove it should the stub die.
  t.teardown(() => removeSandbox(env.docker, `cap-host-stub-${host.slice(0, 12)}`));
  let health = '';
  for (const deadline = Date.now() + 90_000; Date.now() < deadline && health !== 'healthy';) {
    health = await healthOf(env.docker, host);
    if (health !== 'healthy') await new Promise((r) => setTimeout(r, 500));
  }
  const logs = (await project.run(['logs', '--no-color', 'capybara'])).stdout;
  t.equal(health, 'healthy', `the stand-in host is healthy:\n${logs}`);
  t.comment(`up -d to a healthy host (plugin loaded, one sandbox created and removed) took ${Date.now() - started} ms`);
  t.match(logs, /"event":"activated","plugin":"sandbox-docker"/);
  t.match(logs, /"event":"ready","sandbox":"cap-host-stub-\w+"/);

  await t.test('the socket proxy publishes nothing', async (t) => {
    const info = await env.docker.getContainer(await project.id('socket-proxy')).inspect();
    t.same(Object.keys(info.NetworkSettings.Networks), [`${project.name}_sandbox-control`]);
    t.same(info.HostConfig.PortBindings ?? {}, {});
    // Nor is it reachable from the host: an internal bridge keeps its gateway address on the host
    // unless inhibit_ipv4 is set, and through it any local user (uid 65534 in a review) drove the
    // Docker API through the proxy. No interface of the host has an address in its subnet.
    const net = await env.docker.getNetwork(`${project.name}_sandbox-control`).inspect() as { IPAM?: { Config?: Array<{ Subnet?: string }> } };
    const subnets = (net.IPAM?.Config ?? []).map((c) => c.Subnet).filter((s): s is string => typeof s === 'string' && s.includes('.'));
    t.ok(subnets.length > 0, 'the control network has an IPv4 subnet');
    const host = Object.values(networkInterfaces()).flat().filter((a) => a !== undefined && a.family === 'IPv4').map((a) => a!.address);
    for (const subnet of subnets) {
      t.same(host.filter((a) => inSubnet(a, subnet)), [], `no host address in ${subnet}`);
    }
  });

  await t.test('the CLI in the host container runs a command in an allowlist sandbox', async (t) => {
    const name = `${env.runId}-c`;
    const r = await project.exec('capybara', `capybara-sandbox --label ${TEST_LABEL}=${env.runId} run ${name} --rm --allow deb.debian.org -- 'id -un; curl -sS -i http://example.com/'`);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /^sandbox\n/);
    t.match(r.stdout, /^X-Egress-Reason: host_not_allowed\r$/m);
    t.match(r.stderr, /creating cap-\S+-c: image capybara-sandbox:latest, egress allowlist \[deb\.debian\.org\]/);
  });

  await t.test('doctor passes through the tcp endpoint', async (t) => {
    const r = await project.exec('capybara', `capybara-sandbox --label ${TEST_LABEL}=${env.runId} --json doctor`);
    const checks = JSON.parse(r.stdout || '[]') as Array<{ check: string; status: string; detail: string }>;
    t.same(checks.map((c) => [c.check, c.status]), [
      ['engine_reachable', 'pass'], ['socket_proxy_refuses', 'pass'], ['images_present', 'pass'],
      ['shared_network_icc_off', 'pass'], ['runtime_usable', 'pass'], ['isolation', 'pass'],
      // Listing sandboxes needs the engine itself: through the socket proxy that check is skipped.
      ['transparent_egress', 'pass'], ['sandboxes_egress', 'skip'],
    ], `${r.stdout}\n${r.stderr}`);
    t.equal(r.code, 0);
  });

  const down = await project.run(['down', '--timeout', '2']);
  t.equal(down.code, 0, down.stderr);
  t.equal((await project.run(['ps', '-q'])).stdout.trim(), '', 'down stops both services');
});

async function removeSandbox(docker: Docker, name: string): Promise<void> {
  const filters = { label: [`dev.capybara.sandbox.name=${name}`] };
  for (const c of await docker.listContainers({ all: true, filters })) await docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
  for (const n of await docker.listNetworks({ filters })) await docker.getNetwork(n.Id).remove().catch(() => undefined);
  const { Volumes } = await docker.listVolumes({ filters });
  for (const v of Volumes ?? []) await docker.getVolume(v.Name).remove().catch(() => undefined);
}
