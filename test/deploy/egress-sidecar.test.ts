/**
 * deploy/egress/sidecar.sh, the egress image in front of a plain `docker run` workload, on the
 * real engine: the workload started with the flags the script prints reaches an allowlisted
 * host through the proxy, gets 403 with the reason for anything else and has no route around it;
 * started with only the network and DNS flags (no proxy variable at all), curl reaches it over
 * https and http in transparent mode and a refused name fails at once with NXDOMAIN; bad input is
 * refused and a proxy that cannot start leaves nothing behind. The proxy's way out is a network
 * the test creates (EGRESS_OUTSIDE_NETWORK) with the test's upstream on it.
 */
import t from 'tap';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dockerTest } from '../support/docker.js';
import { runCommand, type Ran } from './compose-cli.js';
import { ISOLATION_PROBE, probeCommand, readProbeOutput } from '../../controller/operator/isolation-probe.js';
import { RAW_SOCKET, startUpstream, testSubnet, UPSTREAM_TEXT, writeUpstreamCert } from './upstream.js';
import { IMAGES } from '../../common/index.js';
import { fileNeeds } from '../support/needs.js';

await fileNeeds(t, 'engine');

const root = fileURLToPath(new URL('../..', import.meta.url));
const script = join(root, 'deploy/egress/sidecar.sh');

t.test('the sidecar pattern for docker run', async (t) => {
  const env = await dockerTest(t, [IMAGES.egress, IMAGES.sandbox]);
  if (!env) return;
  const dir = mkdtempSync(join(tmpdir(), 'cap-sidecar-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // The proxy runs as uid 10001: its policy directory must be readable by it.
  const policyDir = join(dir, 'policy');
  mkdirSync(policyDir, { mode: 0o755 });
  const policy = join(policyDir, 'policy.yaml');
  copyFileSync(join(root, 'deploy/egress/policy/policy.yaml'), policy);

  const outside = env.name('out');
  await env.docker.createNetwork({ Name: outside, Driver: 'bridge', Labels: env.labels, CheckDuplicate: true });
  const certDir = join(dir, 'certs');
  mkdirSync(certDir, { mode: 0o755 });
  writeUpstreamCert(certDir);
  const upstreamIp = await startUpstream(env.docker, env.name('upstream'), outside, env.labels, certDir);
  const { subnet, address } = testSubnet();
  const label = `dev.capybara.test=${env.runId}`;
  const scriptEnv = {
    ...process.env,
    EGRESS_OUTSIDE_NETWORK: outside,
    EGRESS_LABEL: label,
    EGRESS_SUBNET: subnet,
    CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'deb.debian.org': upstreamIp }),
  };
  const sidecar = (...args: string[]): Promise<Ran> => runCommand('bash', [script, ...args], { env: scriptEnv });
  const name = `${env.runId}-side`;

  const started = Date.now();
  const start = await sidecar('start', name, policy);
  t.comment(`start took ${Date.now() - started} ms`);
  t.equal(start.code, 0, start.stderr);
  const flags = start.stdout.trim().split(' ');
  t.same(flags.slice(0, 6), ['--network', `${name}-net`, '--dns', address, '--cap-drop', 'NET_RAW'], 'the network, the proxy as its DNS server, no raw sockets');
  t.ok(flags.includes(`HTTPS_PROXY=http://${name}-egress:3128`));
  t.equal((await sidecar('flags', name)).stdout, start.stdout, 'flags prints the same again');
  const workload = (command: string): Promise<Ran> =>
    runCommand('docker', ['run', '--rm', '--label', label, ...flags, IMAGES.sandbox, 'bash', '-c', command]);

  await t.test('allowlisted host through the proxy, 403 for the rest', async (t) => {
    const allowed = await workload('curl -sS http://deb.debian.org/');
    t.same([allowed.code, allowed.stdout], [0, UPSTREAM_TEXT], allowed.stderr);
    const refused = await workload('curl -sS -i http://example.com/');
    t.match(refused.stdout, /^HTTP\/1\.1 403 /);
    t.match(refused.stdout, /^X-Egress-Reason: host_not_allowed\r$/m);
  });

  await t.test('the workload has no raw socket, even as root (it cannot forge a neighbour\'s source address)', async (t) => {
    const asRoot = (more: readonly string[]): Promise<Ran> => runCommand('docker', ['run', '--rm', '--label', label, '--user', '0', ...more, IMAGES.sandbox, 'bash', '-c', RAW_SOCKET]);
    const r = await asRoot(flags);
    t.match(r, { code: 0, stdout: 'EPERM\n' }, r.stderr);
    const control = await asRoot(['--network', `${name}-net`]);
    t.match(control, { code: 0, stdout: 'opened\n' }, `without the flag, root opens one (the check can tell): ${control.stderr}`);
  });

  await t.test('with only the network and DNS flags (no proxy variable): transparent mode', async (t) => {
    const bare = (command: string): Promise<Ran> =>
      runCommand('docker', ['run', '--rm', '--label', label, ...flags.slice(0, 6), IMAGES.sandbox, 'bash', '-c', command]);
    const r = await bare('env | grep -ci _proxy; curl -sSk https://deb.debian.org/; echo; curl -sS http://deb.debian.org/');
    t.same([r.code, r.stdout], [0, `0\n${UPSTREAM_TEXT}\n${UPSTREAM_TEXT}`], r.stderr);
    const refused = await bare('start=$(date +%s%N); curl -sS https://example.com/; code=$?; echo "exit=$code ms=$(( ($(date +%s%N) - start) / 1000000 ))"');
    t.match(refused.stdout, /exit=6 /, 'could not resolve the host');
    // A lookup that got no answer waits the resolver's 5 s before trying again: under 3 s tells
    // the two apart, with room for a loaded machine (curl's start, dockerd's DNS on the way).
    t.ok(Number(/ms=(\d+)/.exec(refused.stdout)?.[1]) < 3_000, `refused at once: ${refused.stdout.trim()}`);
  });

  await t.test('no route around the proxy', async (t) => {
    const net = await env.docker.getNetwork(`${name}-net`).inspect() as { Internal: boolean; Options: Record<string, string>; IPAM: { Config: Array<{ Gateway?: string }> } };
    t.same([net.Internal, net.Options['com.docker.network.bridge.inhibit_ipv4']], [true, 'true']);
    // Without a host address on the bridge (inhibit_ipv4) the default route's gateway is held by
    // nobody: the probe may try targets behind it, the packets go unanswered.
    const phantom = net.IPAM.Config.map((c) => c.Gateway ?? '').filter((g) => g !== '');
    const targets = [`${upstreamIp}:80`, '169.254.169.254:80', '192.0.2.1:443'];
    const r = await workload(`PROBE='${ISOLATION_PROBE.replace(/'/g, `'\\''`)}'; ${probeCommand(phantom, targets)}`);
    t.equal(r.code, 0, r.stderr);
    for (const v of readProbeOutput(r.stdout, targets)) t.ok(v.isolated, `${v.target}: ${v.result}`);
  });

  await t.test('bad input is refused', async (t) => {
    const rows = [
      { name: 'no such policy file', args: ['start', `${env.runId}-x`, join(dir, 'nope.yaml')], err: /does not exist/ },
      { name: 'a name docker would refuse', args: ['start', 'Bad Name', policy], err: /NAME 'Bad Name'/ },
      { name: 'already started', args: ['start', name, policy], err: /already exists/ },
      { name: 'unknown command', args: ['restart', name], err: /usage/ },
      { name: 'a subnet outside the private ranges', args: ['start', `${env.runId}-y`, policy], env: { EGRESS_SUBNET: '8.8.8.0/24' }, err: /EGRESS_SUBNET '8\.8\.8\.0\/24' must be A\.B\.C\.0\/24 in a private range/ },
    ];
    for (const row of rows) {
      const r = await runCommand('bash', [script, ...row.args], { env: { ...scriptEnv, ...('env' in row ? row.env : {}) } });
      t.equal(r.code, 2, row.name);
      t.match(r.stderr, row.err, row.name);
    }
  });

  await t.test('a proxy that refuses its policy leaves nothing behind', async (t) => {
    writeFileSync(join(policyDir, 'broken.yaml'), 'allowHosts:\n  - 10.0.0.1\n');
    const other = `${env.runId}-broken`;
    // A subnet of its own: the first sidecar still holds the test's.
    const r = await runCommand('bash', [script, 'start', other, join(policyDir, 'broken.yaml')], { env: { ...scriptEnv, EGRESS_SUBNET: testSubnet().subnet } });
    t.not(r.code, 0);
    t.match(r.stderr, /did not become ready/);
    const left = await env.docker.listContainers({ all: true, filters: { name: [other] } });
    const nets = await env.docker.listNetworks({ filters: { name: [other] } });
    t.same([left.length, nets.length], [0, 0]);
  });

  await t.test('stop removes the proxy and its network, not the outside one', async (t) => {
    t.equal((await sidecar('stop', name)).code, 0);
    t.ok(await env.docker.getContainer(`${name}-egress`).inspect().then(() => false, () => true));
    t.ok(await env.docker.getNetwork(`${name}-net`).inspect().then(() => false, () => true));
    t.ok(await env.docker.getNetwork(outside).inspect().then(() => true, () => false));
  });
});
