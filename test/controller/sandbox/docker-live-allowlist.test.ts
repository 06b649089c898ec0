/**
 * Live allowlists on the real engine, through the real socket proxy: an allowlist sandbox's egress
 * proxy reads its allowlist from a registration the controller puts into its volume (the socket
 * proxy's registration route), and `changeAllowHosts` changes it while the sandbox runs:
 * - a host allowed is reached within a second or two of the call's return (measured, from inside);
 * - a tunnel open to a host that is then denied is closed; the same tunnel, with no change, stays
 *   open (the upstream, Python's http.server, never closes an idle connection itself);
 * - a restart of the egress proxy keeps the changed list;
 * - a registration lost is written again (the list of the label) by `resume` and by the check
 *   before a command, each in force when it returns.
 */
import t from 'tap';
import pino from 'pino';
import { createDockerSandbox } from '../../../controller/index.js';
import { execFileSync } from 'node:child_process';
import { EGRESS_PROXY_PORT, registrationArchive } from '../../../common/index.js';
import { namesFor } from '../../../controller/spec/index.js';
import { DockerEngine } from '../../../controller/docker/index.js';
import { inspectSandbox } from '../../../controller/operator/sandbox-detail.js';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { untilInSandbox } from '../../support/sandbox-asserts.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

const SECOND_HOST = 'second.capybara.test';

/**
 * A shell script that opens a CONNECT tunnel to HOST:80 through the proxy, then says how long it
 * stayed open (at most `seconds`); `opened`, when given, is a file it makes once the proxy has
 * answered the CONNECT.
 */
function tunnelScript(proxy: string, host: string, seconds: number, opened?: string): string {
  return [
    `exec 3<>/dev/tcp/${proxy}/${EGRESS_PROXY_PORT}`,
    `printf 'CONNECT ${host}:80 HTTP/1.1\\r\\nHost: ${host}:80\\r\\n\\r\\n' >&3`,
    'read -r status <&3; echo "status: $status"',
    ...(opened === undefined ? [] : [`touch ${opened}`]),
    'start=$(date +%s%N)',
    `timeout ${seconds} cat <&3 >/dev/null; code=$?`,
    'echo "open for $(( ($(date +%s%N) - start) / 1000000 )) ms, timeout exit $code"',
  ].join('\n');
}

t.test('allow and deny while the sandbox runs', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const provider = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'sandbox' },
    { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp, [SECOND_HOST]: s.upstreamIp } },
    { logger: pino({ level: 'silent' }) },
  );
  const h = await provider.create({ id: `${s.env.runId}-live`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
  t.teardown(() => provider.destroy(h));
  const egress = namesFor(h.id).egress;
  const fetchWith = async (controller: typeof provider, host: string): Promise<string> => (await controller.exec(h, `curl -sS -o /dev/null -w '%{http_code}' http://${host}/`)).stdout;
  const fetch = (host: string): Promise<string> => fetchWith(provider, host);

  t.equal(await fetch(SECOND_HOST), '403', 'not on the list yet');
  // Timed after the call's return, when its write has landed, and inside the sandbox: one command
  // asks again and again until the host is let through, so what it measures is the proxy's reading
  // of the change (every half second) and curl's own requests. The call's own engine calls (an exec
  // and an archive among them, through the socket proxy), and each command through the controller
  // (its check first, then an exec through the socket proxy), can take a second or more of their
  // own on a loaded machine, which the proxy has no part in: two such commands timed from here
  // could go past the bound with the proxy on time.
  const asked = Date.now();
  t.same(await provider.changeAllowHosts(h, { allow: [SECOND_HOST] }), [UPSTREAM_HOST, SECOND_HOST]);
  const written = Date.now();
  const polled = await provider.exec(h, [
    's=$(date +%s%N)',
    `while :; do code=$(curl -sS -o /dev/null -w '%{http_code}' http://${SECOND_HOST}/); ms=$(( ($(date +%s%N) - s) / 1000000 )); [ "$code" = 200 ] || [ "$ms" -ge 15000 ] && break; sleep 0.05; done`,
    'echo "$code $ms"',
  ].join('\n'));
  const [got, took] = polled.stdout.trim().split(' ');
  t.equal(got, '200', `reached ${took} ms after the command began (${written - asked} ms in the call): ${polled.stdout}${polled.stderr}`);
  t.ok(Number(took) < 3_000, 'within a second or two');

  // A tunnel with no change stays open; the same tunnel is closed when its host is denied.
  const kept = await provider.exec(h, tunnelScript(egress, UPSTREAM_HOST, 3));
  t.match(kept.stdout, /status: HTTP\/1\.1 200[\s\S]*timeout exit 124/, `left alone, it stays open: ${kept.stdout}`);
  const open = provider.exec(h, tunnelScript(egress, UPSTREAM_HOST, 20, '/tmp/tunnel-open'));
  // The deny once the tunnel is open: a fixed wait could come before its CONNECT when the exec started late.
  await untilInSandbox(provider, h, 'test -e /tmp/tunnel-open');
  t.same(await provider.changeAllowHosts(h, { deny: [UPSTREAM_HOST] }), [SECOND_HOST]);
  const closed = await open;
  t.match(closed.stdout, /status: HTTP\/1\.1 200[\s\S]*timeout exit 0/, `denied, it is closed: ${closed.stdout}`);
  const ms = Number(/open for (\d+) ms/.exec(closed.stdout)?.[1] ?? NaN);
  t.ok(ms < 8_000, `closed ${ms} ms after it opened (the deny came once it was open)`);
  t.equal(await fetch(UPSTREAM_HOST), '403', 'and a new request is refused');
  t.same((await inspectSandbox(new DockerEngine({ endpoint: s.proxy.endpoint }), h.id, s.sharedNetwork)).allowHosts, [SECOND_HOST], 'inspect shows the list in force, not the one at create');

  // A restart of the proxy keeps the changed list.
  await s.env.docker.getContainer(egress).restart({ t: 0 });
  let after = await fetch(SECOND_HOST).catch(() => '');
  const restarted = Date.now();
  while (after !== '200' && Date.now() - restarted < 15_000) after = await fetch(SECOND_HOST).catch(() => '');
  t.equal(after, '200', 'the allowed host, after a restart');
  t.equal(await fetch(UPSTREAM_HOST), '403', 'the denied one, still refused');
  t.equal(await (async () => (await provider.exec(h, `curl -sS http://${SECOND_HOST}/`)).stdout)(), UPSTREAM_BODY);

  // The registration lost (a vacant file): refused, seen from inside by the engine alone (the
  // controller's check before a command would write it back first); `resume`, and the next
  // command of a controller that has not read it lately, write the list of the label back and
  // go on once the proxy serves it.
  const lose = () => new DockerEngine({ endpoint: s.proxy.endpoint }).putRegistration(egress, registrationArchive('sandbox', { version: 1, vacant: true }));
  const inside = (host: string): string => execFileSync('docker', ['exec', '-u', '1000', h.id, 'sh', '-c', `curl -s -m 10 -o /dev/null -w '%{http_code}' http://${host}/ || true`], { encoding: 'utf8' });
  // The proxy reads its registration every half second, later on a loaded machine: the loss is
  // judged once it has been read, up to 15 s (a fixed wait could judge it before).
  const refusedInside = async (host: string): Promise<string> => {
    const deadline = Date.now() + 15_000;
    let got = inside(host);
    while (got === '200' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      got = inside(host);
    }
    return got;
  };
  await lose();
  t.not(await refusedInside(SECOND_HOST), '200', 'no registration, nothing through');
  t.equal(await provider.resume(h), 'running');
  t.equal(inside(UPSTREAM_HOST), '200', 'resume wrote the label\'s list back, in force when it returned');
  t.equal(inside(SECOND_HOST), '403', 'the live change went with the lost file');
  await lose();
  t.not(await refusedInside(UPSTREAM_HOST), '200', 'lost again, nothing through');
  const another = createDockerSandbox({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'sandbox' }, { labels: s.env.labels, egressTestHosts: { [UPSTREAM_HOST]: s.upstreamIp } }, { logger: pino({ level: 'silent' }) });
  t.equal(await fetchWith(another, UPSTREAM_HOST), '200', 'written back by the check before the command');
});
