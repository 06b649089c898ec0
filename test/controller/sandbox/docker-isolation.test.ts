/**
 * Isolation proof, from inside real sandboxes. Every probe toward an address outside the
 * sandbox is made only after the sandbox's own routing table shows there is no route to it
 * (the probe script refuses to connect otherwise), so nothing here can send traffic anywhere
 * but to test-created containers: a probe either fails at once with "network unreachable" or
 * is never sent. Outside host names are only asked of the egress proxy, which refuses them
 * before resolving anything. All of it runs twice: with a proxy of its own per allowlist sandbox
 * (egressIsolation sandbox), and with one shard of the shared egress serving both (shared).
 */
import t, { type Test } from 'tap';
import { networkInterfaces } from 'node:os';
import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST, type SandboxTestEnv } from '../../support/sandbox-env.js';
import { createDockerSandbox, isSandboxError, type SandboxHandle, type SandboxProvider } from '../../../controller/index.js';
// The same route-aware probe that `capybara-sandbox doctor` runs: it connects only where the
// sandbox has no route, or only a default route through a gateway nobody holds.
import { ISOLATION_PROBE, probeCommand } from '../../../controller/operator/isolation-probe.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

function hostAddresses(): string[] {
  return Object.values(networkInterfaces()).flat()
    .filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal)
    .map((a) => a!.address);
}

async function ipOf(s: SandboxTestEnv, container: string, network: string): Promise<string> {
  const info = await s.inspect(container);
  return info.NetworkSettings.Networks[network]?.IPAddress ?? '';
}

async function probe(t: Test, provider: SandboxProvider, h: SandboxHandle, phantomGateways: string[], targets: string[]): Promise<void> {
  const r = await provider.exec(h, probeCommand(phantomGateways, targets), { env: { PROBE: ISOLATION_PROBE }, timeoutMs: 60_000 });
  t.equal(r.exitCode, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  t.equal(lines.length, targets.length);
  for (const line of lines) t.match(line, / unreachable (ENETUNREACH|EHOSTUNREACH|timeout)$/, line);
}

/**
 * Docker 20.10 gives containers on an internal network a default route via the network's
 * gateway address. The controller creates those bridges without a host address, so that
 * gateway must be held by nothing: not by the host, not by any container on the network.
 */
async function phantomGateway(t: Test, s: SandboxTestEnv, network: string): Promise<string> {
  const info = await s.env.docker.getNetwork(network).inspect();
  const gateway = info.IPAM?.Config?.[0]?.Gateway ?? '';
  t.ok(gateway, `${network} has a gateway address in IPAM`);
  t.notOk(hostAddresses().includes(gateway), `no host interface holds ${gateway}`);
  const members = Object.values(info.Containers ?? {}).map((c) => String((c as { IPv4Address: string }).IPv4Address).split('/')[0]);
  t.notOk(members.includes(gateway), `no container on ${network} holds ${gateway}`);
  return gateway;
}

// `warm`: shared, with the allowlist sandboxes made on warm networks (warmSlots).
for (const isolation of ['sandbox', 'shared', 'warm'] as const) t.test(`isolation of the none, internal and allowlist tiers (egressIsolation ${isolation})`, async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env } = s;
  // The same tests on both: a proxy of its own per allowlist sandbox, or a shard serving them all.
  const provider = isolation === 'sandbox'
    ? s.provider
    : createDockerSandbox(
      { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared', warmSlots: isolation === 'warm' ? 2 : 0 },
      { labels: env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp } },
    );
  if (isolation === 'warm') t.equal(await provider.warmUp(), 2, 'two warm networks ready');
  const egressOf = (id: string): string => (isolation === 'sandbox' ? `${id}-egress` : `cap-egress.0.${s.sharedNetwork}`);
  // A sandbox's own network, or the warm network it was made on.
  const netOf = async (id: string): Promise<string> => (await s.inspect(id)).Config.Labels['dev.capybara.sandbox.warm-network'] ?? `${id}-net`;
  const base = { image: SANDBOX_IMAGE };
  const started = Date.now();
  const [allow, other, none, internal] = await Promise.all([
    provider.create({ ...base, id: `${env.runId}-a`, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } }),
    provider.create({ ...base, id: `${env.runId}-b`, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } }),
    provider.create({ ...base, id: `${env.runId}-n`, limits: { egress: 'none' } }),
    provider.create({ ...base, id: `${env.runId}-i`, limits: { egress: 'internal' } }),
  ]);
  t.comment(`4 sandboxes created concurrently in ${Date.now() - started} ms`);

  if (isolation === 'warm') t.match([await netOf(allow.id), await netOf(other.id)], [/^cap-warm\./, /^cap-warm\./], 'both allowlist sandboxes on warm networks');
  const otherIp = await ipOf(s, other.id, await netOf(other.id));
  const otherEgressIp = await ipOf(s, egressOf(other.id), s.sharedNetwork);
  const ownEgressShared = await ipOf(s, egressOf(allow.id), s.sharedNetwork);
  const sharedGateway = (await env.docker.getNetwork(s.sharedNetwork).inspect()).IPAM?.Config?.[0]?.Gateway ?? '';
  const outside = [
    '169.254.169.254:80',
    ...hostAddresses().map((ip) => `${ip}:22`),
    `${sharedGateway}:2375`,
    `${otherIp}:22`,
    `${otherEgressIp}:3128`,
    `${ownEgressShared}:3128`,
    `${s.upstreamIp}:80`,
  ];

  for (const [tier, h] of [['allowlist', allow], ['none', none], ['internal', internal]] as const) {
    await t.test(`${tier}: metadata, host, other sandboxes and the upstream are unreachable`, async (t) => {
      const gateways = tier === 'none' ? [] : [await phantomGateway(t, s, await netOf(h.id))];
      await probe(t, provider, h, gateways, outside);
      const sock = await provider.exec(h, 'ls /var/run/docker.sock /run/docker.sock 2>/dev/null; echo "DOCKER_HOST=${DOCKER_HOST:-}"');
      t.equal(sock.stdout, 'DOCKER_HOST=\n', 'no engine socket inside');
    });
  }

  await t.test('allowlist: only the proxy is reachable, and it applies the allowlist', async (t) => {
    const members = Object.values((await env.docker.getNetwork(await netOf(allow.id)).inspect()).Containers ?? {})
      .map((c) => (c as { Name: string }).Name).sort();
    t.same(members, [allow.id, egressOf(allow.id)].sort());
    const ok = await provider.exec(allow, `curl -sS -m 10 http://${UPSTREAM_HOST}/`);
    t.equal(ok.stdout, UPSTREAM_BODY, ok.stderr);
    // Status and reason exactly: `curl -w` prints the status, the header is read by its name.
    const refusal = (url: string) => provider.exec(allow, `curl -s -m 10 -o /dev/null -D /tmp/h -w "%{http_code}" ${url}; echo " $(tr -d "\\r" < /tmp/h | sed -n "s/^[Xx]-[Ee]gress-[Rr]eason: //p")"`);
    t.equal((await refusal('http://not-allowed.capybara.test/')).stdout, '403 host_not_allowed\n');
    t.equal((await refusal('http://169.254.169.254/')).stdout, '403 ip_literal\n');
    // pip shows only the tunnel's status line, in the warning of each retry ("ProxyError('Cannot connect to proxy.',
    // OSError('Tunnel connection failed: 403 ...'))"): the reason must be in it.
    const pip = await provider.exec(allow, 'pip download --no-deps --retries 1 --timeout 10 -d /tmp/pip --index-url https://not-allowed.capybara.test/simple/ anything', { timeoutMs: 60_000 });
    t.not(pip.exitCode, 0);
    t.match(pip.stdout + pip.stderr, /Tunnel connection failed: 403 Forbidden \(host_not_allowed: not-allowed\.capybara\.test is not on the allowlist\)/, 'pip shows why');
  });

  await t.test('allowlist: its egress proxy routes nothing from the sandbox onward, even given a route', async (t) => {
    // The route the sandbox's missing NET_ADMIN keeps it from adding, added from the host: the
    // test upstream's address (the shared network's gateway, on the host) via the proxy's leg.
    const egressOnNet = await ipOf(s, egressOf(allow.id), await netOf(allow.id));
    const sandboxPid = String((await s.inspect(allow.id)).State.Pid);
    const egressPid = String((await s.inspect(egressOf(allow.id))).State.Pid);
    const inNs = (pid: string, ...args: string[]) => execFileSync('nsenter', ['-t', pid, '-n', ...args], { encoding: 'utf8' }).trim();
    t.equal(inNs(egressPid, 'sysctl', '-n', 'net.ipv4.ip_forward'), '0', 'forwarding is off in the proxy\'s namespace');
    inNs(sandboxPid, 'ip', 'route', 'add', `${s.upstreamIp}/32`, 'via', egressOnNet);
    t.teardown(() => inNs(sandboxPid, 'ip', 'route', 'del', `${s.upstreamIp}/32`));
    const listener = createSocket('udp4');
    const got: string[] = [];
    listener.on('message', (m) => got.push(m.toString()));
    await new Promise<void>((resolve) => listener.bind(0, s.upstreamIp, resolve));
    t.teardown(() => listener.close());
    const port = listener.address().port;
    const send = async (word: string) => {
      const r = await provider.exec(allow, `for i in 1 2 3 4 5; do echo ${word} > /dev/udp/${s.upstreamIp}/${port}; sleep 0.1; done; ip=$(awk '$2 == "${s.upstreamIp.split('.').reverse().map((o) => Number(o).toString(16).padStart(2, '0')).join('').toUpperCase()}"' /proc/net/route | wc -l); echo "$ip"`);
      t.equal(r.stdout, '1\n', 'the sandbox has the route');
      await new Promise((r) => setTimeout(r, 1000));
    };
    await send('off');
    // Both layers at once: forwarding off in the proxy's namespace, and Docker's own rule on an
    // internal bridge that drops a frame addressed outside its subnet (where the host's bridge
    // netfilter is on, as here; turning it off for a test would change the whole host).
    t.same(got, [], 'no datagram crossed the proxy');
  });

  await t.test('none: loopback only', async (t) => {
    const r = await provider.exec(none, "awk 'NR>1' /proc/net/route | wc -l");
    t.equal(r.stdout, '0\n');
  });

  if (isolation === 'sandbox') await t.test('an egress proxy that never listens fails the create and leaves nothing', async (t) => {
    const broken = createDockerSandbox({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressProxyImage: SANDBOX_IMAGE }, { labels: env.labels });
    const id = `${env.runId}-broken`;
    try {
      await broken.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
      t.fail('create succeeded without a working proxy');
    } catch (err) {
      t.ok(isSandboxError(err, 'egress_unavailable'), String(err));
    }
    t.same(await s.labelled(`cap-${id}`), []);
  });

  await Promise.all([allow, other, none, internal].map((h) => provider.destroy(h)));
  for (const h of [allow, other, none, internal]) t.same(await s.labelled(h.id), [], `${h.id} fully removed`);
});
