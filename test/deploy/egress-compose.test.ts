/**
 * deploy/egress/compose.yaml on the real engine with docker-compose: the workload reaches an
 * allowlisted host through the egress image, gets 403 with X-Egress-Reason for anything else,
 * has no route around the proxy, and the read-only policy is reloaded when it changes. With no
 * proxy variable at all (transparent mode), curl over https and http and python's urllib reach
 * the allowlisted host, and a refused name fails at once with NXDOMAIN, named in the proxy's log.
 * The example file is used as shipped (on a subnet of the test's own); an override adds only the
 * test's upstream (on the example's outside network, which the test project creates) and pins
 * deb.debian.org and example.com to it, so nothing leaves the networks the test made.
 */
import t from 'tap';
import { cpSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { dockerTest } from '../support/docker.js';
import { composeProject, type Ran } from './compose-cli.js';
import { ISOLATION_PROBE, probeCommand, readProbeOutput } from '../../controller/operator/isolation-probe.js';
import { RAW_SOCKET, testSubnet, upstreamOverride, UPSTREAM_TEXT, writeUpstreamCert } from './upstream.js';
import { IMAGES } from '../../common/index.js';
import { fileNeeds } from '../support/needs.js';

await fileNeeds(t, 'engine');

const root = fileURLToPath(new URL('../..', import.meta.url));

t.test('a workload behind the egress image, with docker-compose', async (t) => {
  const env = await dockerTest(t, [IMAGES.egress, IMAGES.sandbox]);
  if (!env) return;
  const dir = mkdtempSync(join(tmpdir(), 'cap-egress-compose-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const policyDir = join(dir, 'policy');
  cpSync(join(root, 'deploy/egress/policy'), policyDir, { recursive: true });
  const certDir = join(dir, 'certs');
  mkdirSync(certDir, { mode: 0o755 });
  writeUpstreamCert(certDir);
  const override = join(dir, 'override.yaml');
  writeFileSync(override, upstreamOverride('outside', 'egress', certDir));
  const { subnet, gateway, address } = testSubnet();
  const project = composeProject(t, `egress-${env.runId}`, [join(root, 'deploy/egress/compose.yaml'), override], { EGRESS_POLICY_DIR: policyDir, TEST_HOSTS: '{}', EGRESS_SUBNET: subnet, EGRESS_GATEWAY: gateway, EGRESS_ADDRESS: address });
  if (!project) return;

  const first = await project.run(['up', '-d', 'upstream']);
  t.equal(first.code, 0, first.stderr);
  const upstream = await env.docker.getContainer(await project.id('upstream')).inspect();
  const upstreamIp = Object.values(upstream.NetworkSettings.Networks)[0]?.IPAddress ?? '';
  t.match(upstreamIp, /^\d+\.\d+\.\d+\.\d+$/, 'the upstream has an address on the outside network');
  const started = Date.now();
  const up = await project.run(['up', '-d'], { TEST_HOSTS: JSON.stringify({ 'deb.debian.org': upstreamIp, 'example.com': upstreamIp }) });
  t.equal(up.code, 0, up.stderr);
  t.comment(`up -d (egress healthy, then the workload) took ${Date.now() - started} ms`);

  await t.test('the workload has no raw socket, even as root (it cannot forge a neighbour\'s source address)', async (t) => {
    const raw = await project.exec('workload', RAW_SOCKET, '0');
    t.match(raw, { code: 0, stdout: 'EPERM\n' }, raw.stderr);
  });

  await t.test('the workload has limits and cannot gain privileges', async (t) => {
    const { HostConfig } = await env.docker.getContainer(await project.id('workload')).inspect();
    t.equal(HostConfig.PidsLimit, 512, 'pids');
    t.equal(HostConfig.Memory, 1024 * 1024 * 1024, 'memory');
    t.ok((HostConfig.SecurityOpt as string[] | undefined)?.some((o) => /^no-new-privileges(:true)?$/.test(o)), `no-new-privileges in ${JSON.stringify(HostConfig.SecurityOpt)}`);
  });

  await t.test('the allowlisted host answers through the proxy', async (t) => {
    const r = await project.exec('workload', 'curl -sS http://deb.debian.org/');
    t.same([r.code, r.stdout], [0, UPSTREAM_TEXT], r.stderr);
  });

  await t.test('any other host gets 403 with the reason', async (t) => {
    const r = await project.exec('workload', 'curl -sS -i http://example.com/');
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /^HTTP\/1\.1 403 /);
    t.match(r.stdout, /^X-Egress-Reason: host_not_allowed\r$/m);
  });

  await t.test('with no proxy variables: transparent mode', async (t) => {
    const bare = (command: string): Promise<Ran> => project.exec('workload', `unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy NO_PROXY no_proxy; ${command}`);
    const https = await bare('curl -sSk https://deb.debian.org/');
    t.same([https.code, https.stdout], [0, UPSTREAM_TEXT], `curl https: ${https.stderr}`);
    const http = await bare('curl -sS http://deb.debian.org/');
    t.same([http.code, http.stdout], [0, UPSTREAM_TEXT], `curl http: ${http.stderr}`);
    const python = await bare(`python3 -c 'import ssl, urllib.request; print(urllib.request.urlopen("https://deb.debian.org/", context=ssl._create_unverified_context(), timeout=10).read().decode(), end="")'`);
    t.same([python.code, python.stdout], [0, UPSTREAM_TEXT], `python3 urllib: ${python.stderr}`);
    const refused = await bare('start=$(date +%s%N); curl -sS https://example.com/; code=$?; echo "exit=$code ms=$(( ($(date +%s%N) - start) / 1000000 ))"');
    const ms = Number(/ms=(\d+)/.exec(refused.stdout)?.[1]);
    t.match(refused.stdout, /exit=6 /, 'curl: could not resolve the host');
    t.match(refused.stderr, /Could not resolve host: example\.com/);
    // A lookup that got no answer waits the resolver's 5 s before trying again: under 3 s tells
    // the two apart, with room for a loaded machine (curl's start, dockerd's DNS on the way).
    t.ok(ms < 3_000, `refused in ${ms} ms, not after a timeout`);
    const nx = await bare('getent hosts example.com; echo "exit=$?"');
    t.match(nx.stdout, /^exit=2$/m, 'getent: no such name');
    const logs = await project.run(['logs', '--no-color', 'egress']);
    const lines = logs.stdout.split('\n').map((l) => l.replace(/^[^|]*\|\s?/, '')).filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    t.ok(lines.some((l) => l.event === 'decision' && l.reason === 'dns_not_allowed' && l.host === 'example.com' && l.via === 'transparent'), 'the log names the refused name and why');
    t.ok(lines.some((l) => l.event === 'decision' && l.decision === 'allow' && l.host === 'deb.debian.org' && l.via === 'transparent' && l.sni === 'deb.debian.org'), 'the allowed TLS connection, via transparent');
  });

  await t.test('no route around the proxy', async (t) => {
    const phantom = await phantomGateways(env.docker, `${project.name}_workload`);
    t.ok(phantom.length > 0, 'the workload network has no host address: its gateway is held by nobody');
    const targets = [`${upstreamIp}:80`, '169.254.169.254:80', '192.0.2.1:443'];
    const r = await project.exec('workload', `PROBE=${shellQuote(ISOLATION_PROBE)}; ${probeCommand(phantom, targets)}`);
    t.equal(r.code, 0, r.stderr);
    for (const v of readProbeOutput(r.stdout, targets)) t.ok(v.isolated, `${v.target}: ${v.result}`);
  });

  await t.test('the policy is mounted read-only', async (t) => {
    const info = await env.docker.getContainer(await project.id('egress')).inspect();
    const mount = info.Mounts.find((m) => m.Destination === '/etc/capybara-egress');
    t.same([mount?.Source, mount?.RW], [policyDir, false]);
  });

  await t.test('a changed policy applies without a restart', async (t) => {
    const file = join(policyDir, 'policy.yaml');
    const next = readFileSync(file, 'utf8').replace('allowHosts:\n', 'allowHosts:\n  - example.com\n');
    // As editors save: a new file renamed over the old one.
    writeFileSync(`${file}.tmp`, next);
    renameSync(`${file}.tmp`, file);
    let last = '';
    for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
      last = (await project.exec('workload', 'curl -sS http://example.com/')).stdout;
      if (last === UPSTREAM_TEXT) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    t.equal(last, UPSTREAM_TEXT, 'example.com is allowed after the edit');
  });
});

/**
 * Gateways of an internal network without a host address that no member holds: packets sent
 * there go unanswered, so the isolation probe may try targets routed through them.
 */
async function phantomGateways(docker: Docker, network: string): Promise<string[]> {
  const info = await docker.getNetwork(network).inspect() as { Internal: boolean; Options: Record<string, string>; IPAM: { Config: Array<{ Gateway?: string }> }; Containers: Record<string, { IPv4Address: string }> };
  if (!info.Internal || info.Options['com.docker.network.bridge.inhibit_ipv4'] !== 'true') return [];
  const members = new Set(Object.values(info.Containers).map((c) => c.IPv4Address.split('/')[0]));
  return info.IPAM.Config.map((c) => c.Gateway ?? '').filter((g) => g !== '' && !members.has(g));
}

function shellQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}
