/**
 * Isolation proof, from inside real sandboxes. Every probe toward an address outside the
 * sandbox is made only after the sandbox's own routing table shows there is no route to it
 * (the probe script refuses to connect otherwise), so nothing here can send traffic anywhere
 * but to test-created containers: a probe either fails at once with "network unreachable" or
 * is never sent. Outside host names are only asked of the egress proxy, which refuses them
 * before resolving anything.
 */
import t, { type Test } from 'tap';
import { networkInterfaces } from 'node:os';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST, type SandboxTestEnv } from '../support/sandbox-env.js';
import type { SandboxHandle, SandboxProvider } from '../../controller/index.js';

// Reads /proc/net/route; for each ip:port prints "unroutable <errno>" after a connect attempt
// that the kernel refuses locally, or "routable" without connecting at all.
const PROBE = String.raw`
import socket, struct, sys, errno
routes = []
for line in open('/proc/net/route').read().splitlines()[1:]:
    f = line.split()
    dest, mask = int(f[1], 16), int(f[7], 16)
    routes.append((dest, mask))
def routable(ip):
    n = struct.unpack('<I', socket.inet_aton(ip))[0]
    return any((n & mask) == dest for dest, mask in routes)
for target in sys.argv[1:]:
    ip, port = target.rsplit(':', 1)
    if routable(ip):
        print(target, 'routable')
        continue
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((ip, int(port)))
        print(target, 'CONNECTED')
    except OSError as e:
        print(target, 'unroutable', errno.errorcode.get(e.errno, e.errno))
`;

function hostAddresses(): string[] {
  return Object.values(networkInterfaces()).flat()
    .filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal)
    .map((a) => a!.address);
}

async function ipOf(s: SandboxTestEnv, container: string, network: string): Promise<string> {
  const info = await s.inspect(container);
  return info.NetworkSettings.Networks[network]?.IPAddress ?? '';
}

async function probe(t: Test, provider: SandboxProvider, h: SandboxHandle, targets: string[]): Promise<void> {
  const r = await provider.exec(h, `python3 -c "$PROBE" ${targets.join(' ')}`, { env: { PROBE }, timeoutMs: 60_000 });
  t.equal(r.exitCode, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  t.equal(lines.length, targets.length);
  for (const line of lines) t.match(line, / unroutable ENETUNREACH$/, line);
}

t.test('isolation of the none, internal and allowlist tiers', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env } = s;
  const base = { image: SANDBOX_IMAGE };
  const started = Date.now();
  const [allow, other, none, internal] = await Promise.all([
    provider.create({ ...base, id: `${env.runId}-a`, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } }),
    provider.create({ ...base, id: `${env.runId}-b`, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } }),
    provider.create({ ...base, id: `${env.runId}-n`, limits: { egress: 'none' } }),
    provider.create({ ...base, id: `${env.runId}-i`, limits: { egress: 'internal' } }),
  ]);
  t.comment(`4 sandboxes created concurrently in ${Date.now() - started} ms`);

  const otherIp = await ipOf(s, other.id, `${other.id}-net`);
  const otherEgressIp = await ipOf(s, `${other.id}-egress`, s.sharedNetwork);
  const ownEgressShared = await ipOf(s, `${allow.id}-egress`, s.sharedNetwork);
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
    await t.test(`${tier}: no route to metadata, host, other sandboxes, upstream`, async (t) => {
      await probe(t, provider, h, outside);
      const sock = await provider.exec(h, 'ls /var/run/docker.sock /run/docker.sock 2>/dev/null; echo "DOCKER_HOST=${DOCKER_HOST:-}"');
      t.equal(sock.stdout, 'DOCKER_HOST=\n', 'no engine socket inside');
      const routes = await provider.exec(h, "awk 'NR>1 && $2==\"00000000\"' /proc/net/route");
      t.equal(routes.stdout, '', 'no default route');
    });
  }

  await t.test('allowlist: only the proxy is reachable, and it applies the allowlist', async (t) => {
    const members = Object.values((await env.docker.getNetwork(`${allow.id}-net`).inspect()).Containers ?? {})
      .map((c) => (c as { Name: string }).Name).sort();
    t.same(members, [allow.id, `${allow.id}-egress`].sort());
    const ok = await provider.exec(allow, `curl -sS -m 10 http://${UPSTREAM_HOST}/`);
    t.equal(ok.stdout, UPSTREAM_BODY, ok.stderr);
    const denied = await provider.exec(allow, 'curl -s -m 10 -o /dev/null -D - http://not-allowed.capybara.test/ | tr -d "\\r" | grep -i -E "^(HTTP|x-egress-reason)"');
    t.match(denied.stdout, /403/);
    t.match(denied.stdout, /host_not_allowed/i);
    const literal = await provider.exec(allow, 'curl -s -m 10 -o /dev/null -D - http://169.254.169.254/ | tr -d "\\r" | grep -i "^x-egress-reason"');
    t.match(literal.stdout, /ip_literal/i);
  });

  await t.test('none: loopback only', async (t) => {
    const r = await provider.exec(none, "awk 'NR>1' /proc/net/route | wc -l");
    t.equal(r.stdout, '0\n');
  });

  await Promise.all([allow, other, none, internal].map((h) => provider.destroy(h)));
  for (const h of [allow, other, none, internal]) t.same(await s.labelled(h.id), [], `${h.id} fully removed`);
});
