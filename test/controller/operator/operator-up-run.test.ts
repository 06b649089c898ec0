/**
 * up, create, run and down of the operator CLI against the real engine: up starts the real
 * socket proxy on a unix socket in a root-only directory (here a fresh one per run, with a
 * container name carrying the run id, so nothing collides with a real deployment or another
 * test), create and run go through that proxy, and down removes it. The allowlisted host is the
 * test's own upstream, pinned with CAPYBARA_EGRESS_TEST_HOSTS as the controller tests do.
 */
import t from 'tap';
import { chmodSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { sandboxTestEnv, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { dockerTest, SOCKET_PROXY_IMAGE, TEST_LABEL } from '../../support/docker.js';
import { EGRESS_IMAGE, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { runOperator } from '../../../controller/operator/index.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

interface Ran { code: number; stdout: string; stderr: string }

t.test('up, create, run and down through a socket proxy that up started', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env } = s;
  const base = mkdtemp();
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const socketDir = join(base, 'sock');
  // Never a cap- name: the socket proxy lets callers exec into cap- containers (and up refuses one).
  const proxyName = `sockproxy-${env.runId}-up`;
  const global = ['--socket-dir', socketDir, '--proxy-name', proxyName, '--proxy-image', SOCKET_PROXY_IMAGE, '--network', s.sharedNetwork, '--label', `${TEST_LABEL}=${env.runId}`];
  const testHosts = { CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ [UPSTREAM_HOST]: s.upstreamIp }) };
  const op = async (argv: string[], extraEnv: Record<string, string> = {}): Promise<Ran> => {
    let stdout = '';
    let stderr = '';
    const code = await runOperator([...global, ...argv], { stdout: (x) => { stdout += x; }, stderr: (x) => { stderr += x; }, env: { ...process.env, ...extraEnv } });
    return { code, stdout, stderr };
  };
  const demo = `cap-${env.runId}-demo`;

  await t.test('up starts the proxy on a root-only socket and reuses it', async (t) => {
    const started = Date.now();
    const up = await op(['--json', 'up']);
    t.comment(`up (create and start the socket proxy) took ${Date.now() - started} ms`);
    t.equal(up.code, 0, up.stderr);
    const r = JSON.parse(up.stdout) as { endpoint: string; action: string; images: string[] };
    t.same([r.endpoint, r.action], [`unix://${socketDir}/docker.sock`, 'created']);
    t.equal(statSync(socketDir).mode & 0o777, 0o700, 'the socket directory is root-only');
    const info = await env.docker.getContainer(proxyName).inspect();
    t.same([info.HostConfig.NetworkMode, info.HostConfig.CapDrop, info.HostConfig.ReadonlyRootfs, info.HostConfig.RestartPolicy?.Name], ['none', ['ALL'], true, 'unless-stopped']);
    t.ok(info.Config.Env.includes(`SOCKET_PROXY_SHARED_NETWORK=${s.sharedNetwork}`));
    const again = await op(['up']);
    t.equal(again.code, 0, again.stderr);
    t.match(again.stdout, /^socket proxy \S+: already running/);
    t.match(again.stdout, new RegExp(`^endpoint: unix://${socketDir}/docker\\.sock$`, 'm'));
  });

  await t.test('create makes an allowlist sandbox and refuses to replace it', async (t) => {
    const started = Date.now();
    const created = await op(['create', `${env.runId}-demo`, '--allow', UPSTREAM_HOST, '--memory', '512'], testHosts);
    t.comment(`first create took ${Date.now() - started} ms`);
    t.equal(created.code, 0, created.stderr);
    t.equal(created.stdout, `${demo}\n`);
    t.match(created.stderr, new RegExp(`creating ${demo}: image capybara-sandbox:latest, egress allowlist \\[${UPSTREAM_HOST.replace(/\./g, '\\.')}\\], memory 512 MB`));
    t.match(created.stderr, new RegExp(`${demo} is ready \\(\\d+\\.\\d s\\)`));
    const inspected = JSON.parse((await op(['--json', 'inspect', demo])).stdout) as { limits: { memory: number }; allowHosts: string[] };
    t.same([inspected.limits.memory, inspected.allowHosts], [512 * 1024 * 1024, [UPSTREAM_HOST]], 'the limits and allowlist asked for');
    const open = await op(['--json', 'create', `${env.runId}-open`, '--egress', 'open']);
    const lines = open.stderr.trim().split('\n').map((l) => JSON.parse(l) as { progress?: string; error?: { code: string } });
    t.match(lines[0]?.progress, /^creating /, 'with --json the progress lines are JSON too');
    t.equal(lines.at(-1)?.error?.code, 'open_egress_disabled', 'open egress needs allowOpenEgress in the config');
    const twice = await op(['--json', 'create', demo]);
    t.equal(twice.code, 1);
    t.equal(JSON.parse(twice.stderr).error.code, 'invalid_spec', twice.stderr);
  });

  await t.test('run reuses it: an allowed fetch, a refused one, the exit code', async (t) => {
    const started = Date.now();
    const allowed = await op(['run', demo, '--', `curl -sS http://${UPSTREAM_HOST}/`]);
    t.comment(`run in an existing sandbox took ${Date.now() - started} ms`);
    t.same([allowed.code, allowed.stdout], [0, UPSTREAM_BODY], allowed.stderr);
    const refused = await op(['run', demo, '--', 'curl -sS -i http://example.com/']);
    t.equal(refused.code, 0, refused.stderr);
    t.match(refused.stdout, /^HTTP\/1\.1 403 /);
    t.match(refused.stdout, /^X-Egress-Reason: host_not_allowed\r?$/m);
    const exit = await op(['run', demo, '--', 'echo out; echo err >&2; exit 3']);
    t.same([exit.code, exit.stdout, exit.stderr], [3, 'out\n', 'err\n']);
  });

  await t.test('run refuses a sandbox that differs from the options given', async (t) => {
    const r = await op(['--json', 'run', demo, '--allow', 'other.example', '--', 'true']);
    t.equal(r.code, 1);
    t.equal(JSON.parse(r.stderr).error.code, 'invalid_spec');
    t.match(JSON.parse(r.stderr).error.message, /allowlist is \[upstream\.capybara\.test\], not \[other\.example\]/);
  });

  await t.test('run --rm creates what is missing and removes it afterwards', async (t) => {
    const name = `cap-${env.runId}-once`;
    const r = await op(['run', name, '--egress', 'none', '--rm', '--', 'echo once']);
    t.same([r.code, r.stdout], [0, 'once\n'], r.stderr);
    t.match(r.stderr, /creating .*egress none/);
    t.same(await s.labelled(name), [], 'nothing of it is left');
  });

  await t.test('--workspace mounts a persistent workspace that outlives the sandbox', async (t) => {
    const key = `${env.runId}-ws`;
    const first = await op(['run', `${env.runId}-w1`, '--egress', 'none', '--workspace', key, '--rm', '--', 'echo kept > /workspace/note']);
    t.equal(first.code, 0, first.stderr);
    const second = await op(['run', `${env.runId}-w2`, '--egress', 'none', '--workspace', key, '--rm', '--', 'cat /workspace/note']);
    t.same([second.code, second.stdout], [0, 'kept\n'], second.stderr);
    t.ok(await env.docker.getVolume(`cap-ws.${key}`).inspect().then(() => true, () => false), 'the workspace volume stays after --rm');
  });

  await t.test('down removes the proxy and names the sandboxes that stay', async (t) => {
    const r = await op(['--json', 'down']);
    t.equal(r.code, 0, r.stderr);
    const d = JSON.parse(r.stdout) as { action: string; sandboxes: string[] };
    t.same([d.action, d.sandboxes], ['removed', [demo]]);
    t.notOk(existsSync(socketDir), 'the socket and its directory are gone');
    t.ok(await env.docker.getContainer(proxyName).inspect().then(() => false, () => true), 'the proxy container is gone');
    t.match(await op(['down']), { code: 0, stdout: /^no socket proxy \S+ was running/ });
    const unreachable = await op(['--json', 'exec', demo, '--', 'true']);
    t.equal(unreachable.code, 1);
    const error = JSON.parse(unreachable.stderr).error as { code: string; message: string };
    t.equal(error.code, 'engine_unavailable');
    t.match(error.message, /Start the socket proxy first: capybara-sandbox up/);
  });

  await t.test('run starts the proxy itself when nothing answers', async (t) => {
    const r = await op(['run', demo, '--', 'echo back']);
    t.same([r.code, r.stdout], [0, 'back\n'], r.stderr);
    t.match(r.stderr, /no socket proxy answers on unix:\/\/\S+; starting one \(capybara-sandbox up\)/);
    t.equal((await op(['destroy', demo])).code, 0);
    t.equal((await op(['down'])).code, 0);
  });

  await t.test('up refuses what it should not take over', async (t) => {
    rmSync(socketDir, { recursive: true, force: true });
    const open = join(base, 'open');
    const leaky = await runOperator(['--socket-dir', open, '--proxy-name', proxyName, '--proxy-image', SOCKET_PROXY_IMAGE, 'up'], quiet());
    t.equal(leaky, 0, 'a fresh directory is made root-only');
    chmodSync(open, 0o750);
    t.equal(await runOperator(['--socket-dir', open, '--proxy-name', proxyName, '--proxy-image', SOCKET_PROXY_IMAGE, 'up'], quiet()), 2, 'a directory others may enter is refused');
    t.equal(await runOperator(['--socket-dir', open, '--proxy-name', proxyName, 'down'], quiet()), 0);
    const foreign = `foreign-${env.runId}`;
    await env.docker.createContainer({ name: foreign, Image: SOCKET_PROXY_IMAGE, Labels: env.labels, HostConfig: { NetworkMode: 'none' } });
    const r = await op(['--proxy-name', foreign, '--json', 'up']);
    t.equal(r.code, 2);
    t.match(JSON.parse(r.stderr).error.message, /exists and was not started by capybara-sandbox up/);
    t.equal((await op(['--proxy-name', foreign, 'down'])).code, 2, 'down leaves it alone too');
    t.ok(await env.docker.getContainer(foreign).inspect().then(() => true, () => false), 'still there');
  });
});

t.test('down says how many sandboxes remain; down --all removes them, the socket proxy and the shared network', async (t) => {
  const env = await dockerTest(t, [SANDBOX_IMAGE, EGRESS_IMAGE, SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const base = mkdtemp();
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const socketDir = join(base, 'sock');
  const proxyName = `sockproxy-${env.runId}-all`;
  // A shared network of its own, which the controller makes (labelled as its shared network).
  const sharedNetwork = env.name('allnet');
  const global = ['--socket-dir', socketDir, '--proxy-name', proxyName, '--proxy-image', SOCKET_PROXY_IMAGE, '--network', sharedNetwork, '--label', `${TEST_LABEL}=${env.runId}`];
  const op = async (argv: string[]): Promise<Ran> => {
    let stdout = '';
    let stderr = '';
    const code = await runOperator([...global, ...argv], { stdout: (x) => { stdout += x; }, stderr: (x) => { stderr += x; } });
    return { code, stdout, stderr };
  };
  const exists = async (kind: 'container' | 'network' | 'volume', name: string): Promise<boolean> => {
    const handle = kind === 'container' ? env.docker.getContainer(name) : kind === 'network' ? env.docker.getNetwork(name) : env.docker.getVolume(name);
    return handle.inspect().then(() => true, () => false);
  };
  const one = `cap-${env.runId}-one`;
  const two = `cap-${env.runId}-two`;
  const key = `${env.runId}-keep`;
  t.equal((await op(['up'])).code, 0, 'up');
  const created1 = await op(['create', one, '--allow', 'doctor.capybara.invalid']);
  t.equal(created1.code, 0, created1.stderr);
  const created2 = await op(['create', two, '--egress', 'internal', '--workspace', key]);
  t.equal(created2.code, 0, created2.stderr);
  t.ok(await exists('network', sharedNetwork), 'the controller made the shared network');
  // What a create that died leaves: a volume of a sandbox whose container never came.
  const leftover = `cap-${env.runId}-died`;
  await env.docker.createVolume({ Name: `${leftover}-workspace`, Labels: { ...env.labels, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': leftover } });

  const plain = await op(['down']);
  t.equal(plain.code, 0, plain.stderr);
  t.match(plain.stdout, new RegExp(`^socket proxy ${proxyName} stopped and removed\\n2 sandbox\\(es\\) remain and keep running: ${one}, ${two}; capybara-sandbox down --all removes them`));
  t.ok(await exists('container', one), 'plain down leaves the sandboxes');

  t.equal((await op(['up'])).code, 0, 'up again');
  // A stopped container that names the shared network (the network's inspect does not list it):
  // the network stays while it is there, or that container could never start again.
  const stopped = env.name('stopped-user');
  await env.docker.createContainer({ name: stopped, Image: SANDBOX_IMAGE, Cmd: ['true'], Labels: env.labels, HostConfig: { NetworkMode: sharedNetwork } });
  const kept = await op(['down', '--all']);
  t.equal(kept.code, 0, kept.stderr);
  t.match(kept.stdout, new RegExp(`^shared network ${sharedNetwork}: kept \\(still used by ${stopped}\\)$`, 'm'), 'a stopped container keeps the shared network');
  t.ok(await exists('network', sharedNetwork));
  await env.docker.getContainer(stopped).remove({ force: true });

  // Every sandbox again, for the whole run.
  t.equal((await op(['up'])).code, 0, 'up again');
  t.equal((await op(['create', one, '--allow', 'doctor.capybara.invalid'])).code, 0);
  t.equal((await op(['create', two, '--egress', 'internal', '--workspace', key])).code, 0);
  await env.docker.createVolume({ Name: `${leftover}-workspace`, Labels: { ...env.labels, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': leftover } });
  const started = Date.now();
  const all = await op(['down', '--all']);
  t.comment(`down --all of 3 sandboxes took ${Date.now() - started} ms`);
  t.equal(all.code, 0, all.stderr);
  t.match(all.stderr, new RegExp(`destroying 3 sandbox\\(es\\): ${leftover}, ${one}, ${two}`));
  t.equal(all.stdout, [
    `socket proxy ${proxyName} stopped and removed`,
    `3 sandbox(es) destroyed: ${leftover}, ${one}, ${two}`,
    `shared network ${sharedNetwork}: removed`,
    '',
  ].join('\n'));
  for (const name of [one, two, leftover]) {
    const left = await env.docker.listContainers({ all: true, filters: { label: [`dev.capybara.sandbox.name=${name}`] } });
    const nets = await env.docker.listNetworks({ filters: { label: [`dev.capybara.sandbox.name=${name}`] } });
    const { Volumes } = await env.docker.listVolumes({ filters: { label: [`dev.capybara.sandbox.name=${name}`] } });
    t.same([...left.map((c) => c.Names[0]), ...nets.map((n) => n.Name), ...(Volumes ?? []).map((v) => v.Name)].filter((n) => n !== `cap-ws.${key}`), [], `nothing of ${name} is left`);
  }
  t.notOk(await exists('container', proxyName), 'the socket proxy is gone');
  t.notOk(existsSync(socketDir), 'and its socket');
  t.notOk(await exists('network', sharedNetwork), 'the shared network is gone');
  t.ok(await exists('volume', `cap-ws.${key}`), 'the persistent workspace stays');

  const again = await op(['--json', 'down', '--all']);
  t.equal(again.code, 0, again.stderr);
  t.match(JSON.parse(again.stdout), { action: 'absent', destroyed: [], failed: [], sandboxes: [], sharedNetwork: { name: sharedNetwork, action: 'absent' } }, 'again: nothing to do');
});

/** Under /run (root's, 0755): every directory above the socket must be root's alone, and /tmp is everyone's. */
function mkdtemp(): string {
  return mkdtempSync('/run/cap-up-');
}

function quiet(): { stdout: (x: string) => void; stderr: (x: string) => void } {
  return { stdout: () => undefined, stderr: () => undefined };
}
