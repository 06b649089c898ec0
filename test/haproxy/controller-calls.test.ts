/**
 * Every Docker call the sandbox controller makes, made with dockerode through the real socket proxy
 * in front of the real engine, in the request shapes the proxy allows. It doubles as the reference
 * for how the controller must call dockerode:
 * - options go in `_query` and the JSON body in `_body`: plain options would be copied into both
 *   the query string and a body (refused on lifecycle calls), and `docker.pull` adds a `tag`
 *   parameter (refused: a pull takes a single fromImage);
 * - objects are always re-fetched by name (`getContainer(name)`): the create calls resolve to an
 *   object addressed by ID, which the proxy refuses.
 */
import t from 'tap';
import type { Duplex } from 'node:stream';
import { PassThrough } from 'node:stream';
import Docker from 'dockerode';
import { dockerTest, startSocketProxy } from '../support/docker.js';

const SANDBOX_IMAGE = 'capybara-sandbox:latest';

type Opts = Record<string, unknown>;
/** dockerode's escape hatch: exactly this query, exactly this body (none when empty). */
const shape = (query: Opts, body: Opts = {}) => ({ _query: query, _body: body }) as unknown as Opts;

t.test('controller calls through the socket proxy', async (t) => {
  const env = await dockerTest(t);
  if (!env) return;
  if (!(await env.docker.getImage(SANDBOX_IMAGE).inspect().then(() => true, () => false))) {
    t.fail(`image ${SANDBOX_IMAGE} is missing: run bash scripts/build-images.sh`);
    return;
  }
  const proxy = await startSocketProxy(t, env);
  const px = new Docker({ socketPath: proxy.socketPath });
  const name = env.name('sbx');
  const net = `${name}-net`;
  const labels = { ...env.labels, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': name };

  t.equal((await px.ping()).toString(), 'OK', '_ping');
  t.match(await px.version(), { ApiVersion: String }, 'version');
  t.match(await px.getImage(SANDBOX_IMAGE).inspect(), { Id: /^sha256:/ }, 'image inspect');

  // A pull is forwarded: Docker itself fails it (the registry is a closed loopback port), not the proxy.
  const pull = await px.createImage(shape({ fromImage: '127.0.0.1:9/capybara-none:1' }))
    .then(() => null, (err: { statusCode?: number; message: string }) => err);
  t.ok(pull && pull.statusCode !== 403 && !/socket proxy/.test(pull.message),
    `image pull reaches Docker (${pull?.statusCode} ${pull?.message?.slice(0, 120)})`);

  await px.createNetwork(shape({}, {
    Name: net, Driver: 'bridge', Internal: true, CheckDuplicate: true, Labels: labels,
    Options: { 'com.docker.network.bridge.enable_icc': 'false' },
  }));
  t.match(await px.getNetwork(net).inspect(), { Name: net, Internal: true }, 'network create and inspect');

  for (const suffix of ['workspace', 'skills']) {
    await px.createVolume(shape({}, { Name: `${name}-${suffix}`, Labels: labels }));
    t.match(await px.getVolume(`${name}-${suffix}`).inspect(), { Name: `${name}-${suffix}` }, `volume ${suffix}`);
  }

  await px.createContainer(shape({ name }, {
    Image: SANDBOX_IMAGE,
    User: '0:0',
    Labels: labels,
    Env: ['NO_PROXY=localhost,127.0.0.1'],
    HostConfig: {
      NetworkMode: net,
      Runtime: 'runc',
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      ReadonlyRootfs: true,
      Privileged: false,
      PidsLimit: 1024,
      IpcMode: 'private',
      NanoCpus: 1_000_000_000,
      Memory: 256 * 1024 * 1024,
      MemorySwap: 256 * 1024 * 1024,
      Mounts: [
        { Type: 'volume', Source: `${name}-workspace`, Target: '/workspace' },
        { Type: 'volume', Source: `${name}-skills`, Target: '/skills', ReadOnly: true },
        { Type: 'volume', Source: `${name}-skills`, Target: '/opt/capybara/skills' },
        { Type: 'tmpfs', Target: '/tmp', TmpfsOptions: { SizeBytes: 64 * 1024 * 1024, Mode: 0o1777 } },
      ],
    },
    NetworkingConfig: { EndpointsConfig: { [net]: {} } },
  }));
  const box = px.getContainer(name);
  await box.start();
  t.match(await box.inspect(), { State: { Running: true }, HostConfig: { ReadonlyRootfs: true } }, 'hardened container runs');

  // exec with stdin, stdout and stderr through the hijacked stream
  const run = async (cmd: string, stdin: string, user = '1000') => {
    const exec = await box.exec({
      Cmd: ['bash', '-c', cmd], AttachStdin: true, AttachStdout: true, AttachStderr: true, User: user,
    });
    const stream = await exec.start({ hijack: true, stdin: true }) as Duplex;
    const out = new PassThrough();
    const err = new PassThrough();
    const chunks = { out: [] as Buffer[], err: [] as Buffer[] };
    out.on('data', (b: Buffer) => chunks.out.push(b));
    err.on('data', (b: Buffer) => chunks.err.push(b));
    px.modem.demuxStream(stream, out, err);
    const ended = new Promise<void>((resolve) => stream.on('end', resolve));
    stream.end(stdin);
    await ended;
    const info = await exec.inspect();
    return { stdout: Buffer.concat(chunks.out).toString('utf8'), stderr: Buffer.concat(chunks.err).toString('utf8'), code: info.ExitCode };
  };
  const r = await run('cat > /workspace/note.txt; cat /workspace/note.txt; id -u >&2; exit 3', 'héllo\n');
  t.same(r, { stdout: 'héllo\n', stderr: '1000\n', code: 3 }, 'exec: stdin in, stdout and stderr out, exit code by exec inspect');

  await box.stop(shape({ t: 1 }));
  t.match(await box.inspect(), { State: { Running: false } }, 'stop');
  await box.start();
  await box.restart(shape({ t: 0 }));
  t.match(await box.inspect(), { State: { Running: true } }, 'restart');
  await env.docker.getContainer(name).pause(); // pause is not a controller call; the engine does it here
  await box.unpause();
  t.match(await box.inspect(), { State: { Running: true, Paused: false } }, 'unpause');
  const again = await run('cat /workspace/note.txt', '');
  t.equal(again.stdout, 'héllo\n', 'workspace survives a restart');
  await box.kill(shape({ signal: 'SIGKILL' }));
  t.match(await box.inspect(), { State: { Running: false } }, 'kill');

  await box.remove({ force: true, v: true });
  t.equal(await box.inspect().then(() => 200, (e: { statusCode: number }) => e.statusCode), 404, 'container remove');
  for (const suffix of ['workspace', 'skills']) {
    await px.getVolume(`${name}-${suffix}`).remove();
  }
  t.equal(await px.getVolume(`${name}-workspace`).inspect().then(() => 200, (e: { statusCode: number }) => e.statusCode), 404, 'volume remove');
  await px.getNetwork(net).remove();
  t.equal(await px.getNetwork(net).inspect().then(() => 200, (e: { statusCode: number }) => e.statusCode), 404, 'network remove');

  // The same client cannot step outside: listing and ID addressing are refused by the proxy.
  const list = await px.listContainers().then(() => null, (e: { statusCode?: number }) => e.statusCode);
  t.equal(list, 403, 'container list is refused');
});
