/**
 * The sandbox image (capybara-sandbox:latest) as README.md (Images) describes it: user sandbox uid 1000, HOME
 * and working directory /workspace, the listed tools, and a read-only root filesystem that still
 * works (writes go to /workspace and /tmp only).
 */
import t from 'tap';
import { dockerTest } from '../support/docker.js';
import { IMAGES } from '../../common/index.js';
import { fileNeeds } from '../support/needs.js';

await fileNeeds(t, 'engine');

const IMAGE = IMAGES.sandbox;

t.test('sandbox image', async (t) => {
  const env = await dockerTest(t, [IMAGE]);
  if (!env) return;
  const name = env.name('image-sandbox');
  const box = await env.docker.createContainer({
    name,
    Image: IMAGE,
    Labels: env.labels,
    HostConfig: {
      NetworkMode: 'none',
      ReadonlyRootfs: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Mounts: [
        { Type: 'volume', Source: `${name}-workspace`, Target: '/workspace' },
        { Type: 'tmpfs', Source: '', Target: '/tmp' },
      ],
    },
  });
  await box.start();

  const sh = async (cmd: string) => {
    const exec = await box.exec({ Cmd: ['bash', '-c', cmd], AttachStdout: true, AttachStderr: true });
    const stream = await exec.start({});
    const chunks: Buffer[] = [];
    const sink = { write: (b: Buffer) => { chunks.push(b); return true; } } as unknown as NodeJS.WritableStream;
    env.docker.modem.demuxStream(stream, sink, sink);
    await new Promise((resolve) => stream.on('end', resolve));
    // dockerd can end the output a moment before it has taken the exit from containerd (Running,
    // no ExitCode yet; engine-exec.ts asks again for the same reason): asked until it has, 10 s at most.
    let info = await exec.inspect();
    for (const deadline = Date.now() + 10_000; info.Running && Date.now() < deadline; info = await exec.inspect()) {
      await new Promise((r) => setTimeout(r, 25));
    }
    return { out: Buffer.concat(chunks).toString('utf8').trim(), code: info.ExitCode };
  };

  t.match(await box.inspect(), { Config: { User: 'sandbox', WorkingDir: '/workspace' } }, 'image defaults: user and workdir');
  t.same(await sh('id -u; id -g; id -un'), { out: '1000\n1000\nsandbox', code: 0 }, 'runs as sandbox, uid 1000');
  t.same(await sh('echo "$HOME"; pwd'), { out: '/workspace\n/workspace', code: 0 }, 'HOME and workdir are /workspace');
  // What getpwuid() says (curl falls back to it for .curlrc): never the workspace, which a
  // persistent workspace carries from one sandbox to the next.
  t.same(await sh('getent passwd sandbox | cut -d: -f6; ls -A /home/sandbox | wc -l; stat -c %U:%a /home/sandbox'), { out: '/home/sandbox\n0\nroot:1777', code: 0 }, 'the account\'s home is an empty directory of its own');

  const tools: [string, RegExp][] = [
    ['bash --version', /GNU bash/],
    ['ls --version', /GNU coreutils/],
    ['find --version', /GNU findutils/],
    ['grep --version', /GNU grep/],
    ['ps --version', /procps/],
    ['setsid --version', /util-linux/],
    ['curl --version', /^curl /],
    ['git --version', /^git version/],
    ['jq --version', /^jq-/],
    ['python3 --version', /^Python 3\./],
    ['python3 -m pip --version', /^pip /],
    ['tini --version', /tini version/],
  ];
  for (const [cmd, want] of tools) {
    const r = await sh(cmd);
    t.ok(r.code === 0 && want.test(r.out), `${cmd}: ${r.out.split('\n')[0]}`);
  }
  t.same(await sh('python3 -m venv /tmp/venv && /tmp/venv/bin/python -c "print(42)"'), { out: '42', code: 0 },
    'python3 venv works (in /tmp)');

  t.equal((await sh('touch /etc/x 2>/dev/null')).code, 1, 'root filesystem is read-only');
  t.same(await sh('echo ok > /workspace/f && cat /workspace/f && echo tmp > /tmp/f && cat /tmp/f'),
    { out: 'ok\ntmp', code: 0 }, '/workspace and /tmp are writable');
  t.match((await box.inspect()).Path, /tini/, 'tini is the entrypoint');
});
