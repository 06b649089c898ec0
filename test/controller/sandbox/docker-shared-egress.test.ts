/**
 * The shared egress (`egressIsolation: shared`) on the real engine, through the real socket proxy:
 * one shard serves two sandboxes, each on its own internal network, and tells them apart by the
 * network a connection arrives on.
 * - Each sandbox reaches its own allowlist, through its proxy variables and transparently, and
 *   not the other's; its egress usage counts its own requests only, and `logs` shows its own
 *   decisions only, from its create on, and `logs -f` ends when it is destroyed.
 * - A source address of the other sandbox's subnet, put on a sandbox's interface from the host
 *   (the sandbox itself has no capability to), gets nothing: the shard never answers it with the
 *   other sandbox's policy.
 * - The shard forwards nothing between the networks, even when a sandbox is given a route through
 *   it: forwarding is off in its namespace.
 * - A live allow reaches new connections within a second or two and touches no other sandbox.
 * - A sandbox destroyed and created again at once on the same subnet sees only its new policy.
 * - A restart of the shard keeps every sandbox's policy; a registration lost is written again by
 *   recovery, `resume` or the check before a command, which goes on once the shard serves it (the
 *   shard's health answer names the sandbox).
 */
import t from 'tap';
import pino from 'pino';
import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { createDockerSandbox, type SandboxHandle } from '../../../controller/index.js';
import { EGRESS_PROXY_PORT, registrationArchive } from '../../../common/index.js';
import { DockerEngine } from '../../../controller/docker/index.js';
import { inspectSandbox } from '../../../controller/operator/sandbox-detail.js';
import { collectGarbage } from '../../../controller/operator/gc.js';
import { runOperator } from '../../../controller/operator/index.js';
import { engineSocketPath } from '../../support/docker.js';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

const SECOND_HOST = 'second.capybara.test';

t.test('one shard serves many sandboxes, each by its own network', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  // A controller process: each keeps its own memory of the registrations it read lately.
  const controller = () =>
    createDockerSandbox(
      { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared' },
      { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
      { logger: pino({ level: 'silent' }) },
    );
  const provider = controller();
  const shard = `cap-egress.0.${s.sharedNetwork}`;
  const id = (x: string): string => `${s.env.runId}-${x}`;
  const create = (x: string, allowHosts: string[]): Promise<SandboxHandle> => provider.create({ id: id(x), image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts } });
  const [a, b] = await Promise.all([create('a', [UPSTREAM_HOST]), create('b', [SECOND_HOST])]);
  t.teardown(() => Promise.all([provider.destroy(a), provider.destroy(b)]));
  const status = async (h: SandboxHandle, url: string, proxy = true): Promise<string> =>
    (await provider.exec(h, `curl -s -m 10 -o /dev/null -w '%{http_code}' ${proxy ? '' : "--noproxy '*' "}${url}`)).stdout;
  const ipOn = async (container: string, network: string): Promise<string> => (await s.inspect(container)).NetworkSettings.Networks[network]?.IPAddress ?? '';

  await t.test('each sandbox reaches its own allowlist only, explicit and transparent', async (t) => {
    t.same(await s.labelled(`${a.id}-egress`), [], 'no proxy container of its own');
    const members = Object.values((await s.env.docker.getNetwork(`${a.id}-net`).inspect()).Containers ?? {}).map((c) => (c as { Name: string }).Name).sort();
    t.same(members, [a.id, shard].sort(), 'its network holds the sandbox and the shard');
    t.equal((await provider.exec(a, `curl -sS -m 10 http://${UPSTREAM_HOST}/`)).stdout, UPSTREAM_BODY);
    t.equal(await status(a, `http://${SECOND_HOST}/`), '403', 'b\'s host refused to a');
    t.equal(await status(b, `http://${SECOND_HOST}/`), '200');
    t.equal(await status(b, `http://${UPSTREAM_HOST}/`), '403', 'a\'s host refused to b');
    t.equal(await status(a, `http://${UPSTREAM_HOST}/`, false), '200', 'transparent: the shard answers a\'s DNS on a\'s network');
    t.equal(await status(b, `http://${UPSTREAM_HOST}/`, false), '000', 'and refuses the name to b (NXDOMAIN)');
    // Each sandbox's usage is its own share of the shard's counts.
    const [ua, ub] = await Promise.all([provider.egressUsage(a), provider.egressUsage(b)]);
    t.ok(ua !== null && ua.allowed === 2 && ua.denied === 1 && ua.deniedByReason.host_not_allowed === 1 && ua.bytesDown > UPSTREAM_BODY.length, `a's usage: ${JSON.stringify(ua)}`);
    t.ok(ub !== null && ub.allowed === 1 && ub.denied === 1 && ub.deniedByReason.host_not_allowed === 1, `b's usage: ${JSON.stringify(ub)}`);
  });

  await t.test('logs of a sandbox on the shard: its own decisions only, from its create on; -f ends when it goes', async (t) => {
    const op = async (argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
      let stdout = '';
      let stderr = '';
      const code = await runOperator(['--endpoint', `unix://${engineSocketPath()}`, '--network', s.sharedNetwork, ...argv], { stdout: (x) => { stdout += x; }, stderr: (x) => { stderr += x; } });
      return { code, stdout, stderr };
    };
    const records = async (name: string): Promise<Array<Record<string, unknown>>> => {
      // The shard writes its lines in batches, at least every 250 ms.
      const deadline = Date.now() + 10_000;
      for (;;) {
        const r = await op(['--json', 'logs', name]);
        t.equal(r.code, 0, r.stderr);
        const lines = r.stdout.trimEnd().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>);
        if (lines.some((l) => l.decision === 'deny') || Date.now() > deadline) return lines;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    };
    const ofA = await records(a.id);
    t.ok(ofA.length >= 3 && ofA.every((l) => l.sandbox === a.id), `a's records only: ${JSON.stringify(ofA.map((l) => [l.sandbox, l.decision, l.host]))}`);
    t.ok(ofA.some((l) => l.decision === 'deny' && l.host === SECOND_HOST && l.reason === 'host_not_allowed'), 'a\'s refusal of b\'s host');
    t.notOk(ofA.some((l) => l.decision === 'allow' && l.host === SECOND_HOST), 'not b\'s allowed request');
    const ofB = await records(b.id);
    t.ok(ofB.length >= 2 && ofB.every((l) => l.sandbox === b.id), `b's records only: ${JSON.stringify(ofB.map((l) => [l.sandbox, l.decision, l.host]))}`);
    t.ok(ofB.some((l) => l.method === 'DNS' && l.host === UPSTREAM_HOST && l.reason === 'dns_not_allowed'), 'b\'s refused name, from the shard\'s DNS');
    const text = await op(['logs', a.id, '--denied']);
    t.match(text.stdout, new RegExp(`^\\S+Z  denied   GET ${SECOND_HOST.replace(/\./g, '\\.')}:80  host_not_allowed: `), 'as text too');

    // A sandbox of the same name made again is shown from its own create on; -f ends once it goes.
    const c1 = await create('c', [UPSTREAM_HOST]);
    t.equal(await status(c1, `http://${SECOND_HOST}/`), '403');
    t.ok((await records(c1.id)).some((l) => l.host === SECOND_HOST), 'the first c\'s refusal');
    await provider.destroy(c1);
    const c2 = await create('c', [UPSTREAM_HOST]);
    let destroyed = false;
    t.teardown(() => (destroyed ? undefined : provider.destroy(c2)));
    t.same(await op(['--json', 'logs', c2.id]), { code: 0, stdout: '', stderr: '' }, 'nothing of the first c');
    let followed = '';
    let followErr = '';
    const following = runOperator(['--endpoint', `unix://${engineSocketPath()}`, '--network', s.sharedNetwork, 'logs', c2.id, '-f'], { stdout: (x) => { followed += x; }, stderr: (x) => { followErr += x; } });
    t.equal(await status(c2, `http://${SECOND_HOST}/`), '403');
    const seen = Date.now() + 10_000;
    while (!followed.includes(SECOND_HOST) && Date.now() < seen) await new Promise((resolve) => setTimeout(resolve, 100));
    t.match(followed, new RegExp(`denied   GET ${SECOND_HOST.replace(/\./g, '\\.')}:80`), 'followed');
    await provider.destroy(c2);
    destroyed = true;
    const ended = await Promise.race([following, new Promise<'still following'>((resolve) => setTimeout(() => resolve('still following'), 15_000))]);
    t.equal(ended, 1, 'ends once the sandbox is gone, though the shard runs on');
    t.match(followErr, new RegExp(`not_found: sandbox ${c2.id} went away`));
  });

  await t.test('a source address of another sandbox\'s subnet gets nothing', async (t) => {
    // No NET_ADMIN (an address of its own choosing) and no NET_RAW (a packet of its own making).
    const forged = await provider.exec(a, 'grep CapEff /proc/self/status; python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)" 2>&1 | tail -1');
    t.match(forged.stdout, /^CapEff:\s+0000000000000000\n.*PermissionError/, `no capability, no raw socket: ${forged.stdout}`);
    // Given one anyway, from the host: b's subnet on a's interface, toward the shard's address on a's network.
    const pid = String((await s.inspect(a.id)).State.Pid);
    const bSubnet = ((await s.env.docker.getNetwork(`${b.id}-net`).inspect()).IPAM?.Config?.[0]?.Subnet ?? '').split('/')[0] ?? '';
    const source = bSubnet.replace(/\.(\d+)$/, (_, last: string) => `.${Number(last) + 5}`);
    execFileSync('nsenter', ['-t', pid, '-n', 'ip', 'addr', 'add', `${source}/32`, 'dev', 'eth0']);
    t.teardown(() => execFileSync('nsenter', ['-t', pid, '-n', 'ip', 'addr', 'del', `${source}/32`, 'dev', 'eth0']));
    const shardOnA = await ipOn(shard, `${a.id}-net`);
    const got = await provider.exec(a, `curl -s -m 5 --interface ${source} -x http://${shardOnA}:${EGRESS_PROXY_PORT} -o /dev/null -w '%{http_code}' http://${SECOND_HOST}/; echo " exit $?"`);
    t.notMatch(got.stdout, /^200/, `never served as b: ${got.stdout}`);
  });

  await t.test('the shard routes nothing between sandbox networks, even given a route', async (t) => {
    const shardPid = String((await s.inspect(shard)).State.Pid);
    t.equal(execFileSync('nsenter', ['-t', shardPid, '-n', 'sysctl', '-n', 'net.ipv4.ip_forward'], { encoding: 'utf8' }).trim(), '0', 'forwarding off in the shard');
    const bIp = await ipOn(b.id, `${b.id}-net`);
    const aPid = String((await s.inspect(a.id)).State.Pid);
    execFileSync('nsenter', ['-t', aPid, '-n', 'ip', 'route', 'add', `${bIp}/32`, 'via', await ipOn(shard, `${a.id}-net`)]);
    t.teardown(() => execFileSync('nsenter', ['-t', aPid, '-n', 'ip', 'route', 'del', `${bIp}/32`]));
    const listening = provider.exec(b, 'timeout 6 python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\'0.0.0.0\', 9999)); print(s.recv(100))"; echo " exit $?"');
    await new Promise((r) => setTimeout(r, 1_000));
    const sent = await provider.exec(a, `for i in 1 2 3 4 5; do echo crossed > /dev/udp/${bIp}/9999; sleep 0.2; done; echo sent`);
    t.equal(sent.stdout, 'sent\n');
    t.equal((await listening).stdout, ' exit 124\n', 'b received nothing');
    // And a host address the shard holds on the shared network is not a way out either.
    const listener = createSocket('udp4');
    const heard: string[] = [];
    listener.on('message', (m) => heard.push(m.toString()));
    await new Promise<void>((resolve) => listener.bind(0, s.upstreamIp, resolve));
    t.teardown(() => listener.close());
    execFileSync('nsenter', ['-t', aPid, '-n', 'ip', 'route', 'add', `${s.upstreamIp}/32`, 'via', await ipOn(shard, `${a.id}-net`)]);
    t.teardown(() => execFileSync('nsenter', ['-t', aPid, '-n', 'ip', 'route', 'del', `${s.upstreamIp}/32`]));
    await provider.exec(a, `for i in 1 2 3; do echo out > /dev/udp/${s.upstreamIp}/${listener.address().port}; sleep 0.2; done`);
    await new Promise((r) => setTimeout(r, 500));
    t.same(heard, [], 'no datagram left through the shard');
  });

  await t.test('a live allow reaches a within seconds and leaves b alone', async (t) => {
    // Timed inside a, by one command that asks until the host is let through: what it measures is
    // the shard's reading of the change (every half second) and curl's own requests. The call, and
    // each command through the controller, can take a second or more of their own on a loaded
    // machine, which left a 5 s wait from the call's start, command by command, too short there.
    const asked = Date.now();
    t.same(await provider.changeAllowHosts(a, { allow: [SECOND_HOST] }), [UPSTREAM_HOST, SECOND_HOST]);
    const written = Date.now();
    const polled = await provider.exec(a, [
      's=$(date +%s%N)',
      `while :; do code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' http://${SECOND_HOST}/); ms=$(( ($(date +%s%N) - s) / 1000000 )); [ "$code" = 200 ] || [ "$ms" -ge 15000 ] && break; sleep 0.05; done`,
      'echo "$code $ms"',
    ].join('\n'));
    const [got, took] = polled.stdout.trim().split(' ');
    t.equal(got, '200', `reached ${took} ms after the command began (${written - asked} ms in the call): ${polled.stdout}${polled.stderr}`);
    t.ok(Number(took) < 5_000, 'within seconds');
    t.equal(await status(b, `http://${UPSTREAM_HOST}/`), '403', 'b unchanged');
    const engine = new DockerEngine({ endpoint: s.proxy.endpoint });
    t.same((await inspectSandbox(engine, a.id, s.sharedNetwork)).allowHosts, [UPSTREAM_HOST, SECOND_HOST], 'inspect reads the shard\'s registration');
    t.equal((await inspectSandbox(engine, a.id, s.sharedNetwork)).egress, 'running');
  });

  await t.test('a sandbox made again at once on the same subnet sees only its own policy', async (t) => {
    const subnet = async (): Promise<string> => (await s.env.docker.getNetwork(`${a.id}-net`).inspect()).IPAM?.Config?.[0]?.Subnet ?? '';
    const before = await subnet();
    await provider.destroy(a);
    const again = await create('a', [SECOND_HOST]);
    t.equal(await subnet(), before, 'the same subnet');
    t.equal(await status(again, `http://${UPSTREAM_HOST}/`), '403', 'the earlier sandbox\'s host is not allowed');
    t.equal(await status(again, `http://${SECOND_HOST}/`), '200');
  });

  await t.test('a restart of the shard keeps every policy; a lost registration comes back', async (t) => {
    await s.env.docker.getContainer(shard).restart({ t: 0 });
    const settle = async (h: SandboxHandle, url: string): Promise<string> => {
      const from = Date.now();
      let got = await status(h, url).catch(() => '');
      while (got !== '200' && Date.now() - from < 15_000) got = await status(h, url).catch(() => '');
      return got;
    };
    t.equal(await settle(a, `http://${SECOND_HOST}/`), '200', 'a, after the restart');
    t.equal(await status(a, `http://${UPSTREAM_HOST}/`), '403');
    t.equal(await settle(b, `http://${SECOND_HOST}/`), '200', 'b, after the restart');
    t.equal(await status(b, `http://${UPSTREAM_HOST}/`), '403');

    // b's registration lost (a vacant slot): refused, until recovery writes it from its label.
    // Seen from inside b by the engine alone: the controller's check before a command would
    // write it back first.
    const bSubnet = (await s.env.docker.getNetwork(`${b.id}-net`).inspect()).IPAM?.Config?.[0]?.Subnet ?? '';
    const lose = () => new DockerEngine({ endpoint: s.proxy.endpoint }).putRegistration(shard, registrationArchive(bSubnet.replace('/', '_'), { version: 1, vacant: true }));
    const inB = (command: string): string => execFileSync('docker', ['exec', '-u', '1000', b.id, 'sh', '-c', command], { encoding: 'utf8' });
    // The shard reads its registrations every half second, later on a loaded machine: the loss is
    // judged once it has been read, up to 15 s (a fixed wait could judge it before).
    const refusedInB = async (url: string): Promise<string> => {
      const deadline = Date.now() + 15_000;
      const get = (): string => inB(`curl -s -m 10 -o /dev/null -w '%{http_code}' ${url} || true`);
      let got = get();
      while (got === '200' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        got = get();
      }
      return got;
    };
    await lose();
    t.not(await refusedInB(`http://${SECOND_HOST}/`), '200', 'no registration, nothing through');
    // The health answer the controller's probe waits for names the sandbox only while it is registered.
    const health = async (): Promise<string> => (await provider.exec(b, `curl -s -m 5 -D - -o /dev/null --noproxy '*' http://${b.id}-egress:${EGRESS_PROXY_PORT}/healthz`)).stdout;
    t.notMatch(inB(`curl -s -m 5 -D - -o /dev/null --noproxy '*' http://${b.id}-egress:${EGRESS_PROXY_PORT}/healthz`), /X-Egress-Sandbox/i, 'vacant: the shard is healthy but names no sandbox');
    t.equal(await provider.resume(b), 'running');
    t.match(await health(), new RegExp(`\r\nX-Egress-Sandbox: ${b.id}; lifecycle=[0-9a-f-]{36}\r\n`), 'registered: it names b and its registration');
    // resume returned after its probe saw that answer: no wait here.
    t.equal(await status(b, `http://${SECOND_HOST}/`), '200', 'registered again by resume, in force when it returns');

    // Lost again: the next command of a controller that has not read it lately (here another
    // process) writes it back before the command runs.
    await lose();
    t.not(await refusedInB(`http://${SECOND_HOST}/`), '200', 'lost again, nothing through');
    t.equal((await controller().exec(b, `curl -s -m 10 -o /dev/null -w '%{http_code}' http://${SECOND_HOST}/`)).stdout, '200', 'registered again by the check before the command');
  });

  await t.test('gc takes the shard off an orphaned sandbox network before removing it', async (t) => {
    const c = await create('c', [UPSTREAM_HOST]);
    const net = await s.env.docker.getNetwork(`${c.id}-net`).inspect();
    const slot = `${String(net.IPAM?.Config?.[0]?.Subnet).replace('/', '_')}.json`;
    // The sandbox container gone behind the controller's back: its network, with the shard's leg, is an orphan.
    await s.env.docker.getContainer(c.id).remove({ force: true });
    const engine = new DockerEngine({ endpoint: `unix://${engineSocketPath()}` });
    const results = await collectGarbage(engine, { dryRun: false, minAgeMs: 0, extraLabels: s.env.labels, nowMs: Date.now() + 60_000, sharedNetwork: s.sharedNetwork });
    t.match(results.filter((r) => r.sandbox === c.id && r.kind === 'network'), [{ action: 'removed' }], JSON.stringify(results));
    t.same(await s.labelled(c.id), [], 'nothing of it left');
    const shardView = await s.inspect(shard);
    t.notOk(Object.keys(shardView.NetworkSettings.Networks).includes(`${c.id}-net`), 'the shard\'s leg is gone');
    const read = await s.env.docker.getContainer(shard).exec({ Cmd: ['cat', `/var/lib/capybara-egress/tenants/${slot}`], AttachStdout: true, User: 'egress' });
    const stream = await read.start({});
    const text = await new Promise<string>((resolve) => { let out = ''; stream.on('data', (d: Buffer) => { out += d.toString('latin1'); }); stream.on('end', () => resolve(out)); });
    t.match(text, /\{"version":1,"vacant":true\}/, 'its registration ended');
  });
});
