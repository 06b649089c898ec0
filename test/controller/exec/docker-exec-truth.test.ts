/**
 * Results that never lie, on the real engine through the real socket proxy: a full /tmp or disk
 * does not turn the exec wrapper's trouble into the command's exit status, and with a persistent
 * workspace nothing an earlier sandbox wrote into it runs in the next one by itself, unless the
 * operator opts in. What a process left by an earlier command can do to a later one is in
 * docker-exec-isolation.test.ts.
 */
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { rejectsCode } from '../../support/sandbox-asserts.js';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { createDockerSandbox } from '../../../controller/index.js';
import { fileNeeds } from '../../support/needs.js';
import { settle } from '../../support/settle.js';

await fileNeeds(t, 'engine');

const docker = (...args: string[]) => execFileSync('docker', args, { encoding: 'utf8' }).trim();

// Writes until the file system is full (dd stops at ENOSPC), and again a second later from a
// process of its own: whatever the filling command's own exec freed when it ended (the old
// wrapper removed its control file from /tmp) is taken too. The test waits for it (filled).
const fill = (dir: string) => `dd if=/dev/zero of=${dir}/.fill bs=64k status=none 2>/dev/null; setsid sh -c 'sleep 1; dd if=/dev/zero of=${dir}/.fill2 bs=4k status=none 2>/dev/null' >/dev/null 2>&1 < /dev/null &`;
/**
 * Waits until the second dd of every dir has run and ended (its file there, no dd left), a minute
 * at most: on a loaded machine its start and its writes can take longer than any fixed wait. The
 * look is an exec of the engine's own as root, which needs no room in the sandbox and leaves none.
 */
async function filled(id: string, ...dirs: string[]): Promise<void> {
  const check = `${dirs.map((d) => `test -e ${d}/.fill2`).join(' && ')} && ! pgrep -x dd`;
  await settle(() => spawnSync('docker', ['exec', '-u', '0', id, 'sh', '-c', check]).status === 0, `the second fill of ${dirs.join(' and ')}`, 60_000);
}
/** Prints the use of each mount, as the first lines of a command. */
const usage = (...dirs: string[]) => dirs.map((d) => `df --output=pcent ${d} | tail -1 | tr -d ' '`).join('; ');

t.test('exec truth on the real engine', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { provider, env } = s;

  await t.test('a full /tmp: the command runs and its result is its own', async (t) => {
    const h = await provider.create({ id: `${env.runId}-tmp`, image: SANDBOX_IMAGE, limits: { egress: 'none', memoryMb: 256 } });
    t.teardown(() => provider.destroy(h));
    await provider.exec(h, fill('/tmp'));
    await filled(h.id, '/tmp');
    // The old wrapper wrote its control file in /tmp after the start byte: exit 125, "printf: write error".
    t.same(await provider.exec(h, `${usage('/tmp')}; echo still-runs; echo to-stderr >&2; exit 7`), { exitCode: 7, stdout: '100%\nstill-runs\n', stderr: 'to-stderr\n', truncated: false, timedOut: false, aborted: false }, '/tmp is full, and the command\'s result is its own');
    const big = await provider.exec(h, `x='${'y'.repeat(40_000)}'; echo "\${#x}"`);
    t.same([big.exitCode, big.stdout], [0, '40000\n'], 'a command too large for an exec body is not staged in /tmp');
    const r = await provider.exec(h, 'sleep 1008', { timeoutMs: 1500, tag: 'tmp-full' });
    t.same([r.timedOut, r.exitCode], [true, null], 'a timeout still kills');
    t.equal((await provider.exec(h, 'pgrep -c -f "sleep 10[0]8" || true')).stdout, '0\n');
    await provider.writeFile(h, '/workspace/note', 'kept');
    t.equal(Buffer.from(await provider.readFile(h, '/workspace/note')).toString(), 'kept');
  });

  await t.test('every writable place full: still the command\'s own result', async (t) => {
    // A persistent workspace on a 1 MiB tmpfs volume (the local driver's tmpfs options), made
    // here so that the controller mounts it as it is.
    const key = `${env.runId}-small`;
    docker('volume', 'create', '--driver', 'local', '--opt', 'type=tmpfs', '--opt', 'device=tmpfs', '--opt', 'o=size=1m,uid=1000,gid=1000',
      '--label', `dev.capybara.test=${env.runId}`, `cap-ws.${key}`);
    const h = await provider.create({ id: `${env.runId}-disk`, image: SANDBOX_IMAGE, limits: { egress: 'none', memoryMb: 256 }, workspace: { key, durability: 'persistent' } });
    t.teardown(async () => {
      await provider.destroy(h);
      await provider.destroyWorkspace(key);
    });
    await provider.exec(h, `${fill('/workspace')}\n${fill('/tmp')}`);
    await filled(h.id, '/workspace', '/tmp');
    // The root-only place under /skills' writable mount too (nothing of an exec writes there).
    docker('exec', '-u', '0', h.id, 'sh', '-c', 'dd if=/dev/zero of=/opt/capybara/.fill bs=4k 2>/dev/null; true');
    t.match(docker('exec', '-u', '0', h.id, 'df', '--output=pcent', '/opt/capybara'), /100%/);
    t.same(await provider.exec(h, `${usage('/workspace', '/tmp')}; echo still-runs; exit 7`), { exitCode: 7, stdout: '100%\n100%\nstill-runs\n', stderr: '', truncated: false, timedOut: false, aborted: false }, '/workspace and /tmp are full, and the command\'s result is its own');
    const full = await provider.exec(h, 'echo x > /workspace/more');
    t.same([full.exitCode, full.stderr], [1, 'bash: line 1: echo: write error: No space left on device\n'], 'the command\'s own ENOSPC is its own result');
    await rejectsCode(t, provider.writeFile(h, '/workspace/more', 'x'.repeat(100_000)), 'file_error', /No space left on device/);
    t.equal((await provider.stat(h, '/workspace/.fill'))?.type, 'file');
    await provider.killAll(h);
    t.equal((await provider.exec(h, 'echo after-kill')).stdout, 'after-kill\n');
  });

  await t.test('a persistent workspace carries files, not start-up code, unless the operator opts in', async (t) => {
    const key = `${env.runId}-home`;
    const spec = (n: number) => ({ id: `${env.runId}-home${n}`, image: SANDBOX_IMAGE, limits: { egress: 'none' as const }, workspace: { key, durability: 'persistent' as const } });
    t.teardown(() => provider.destroyWorkspace(key));
    // Sandbox 1 plants what runs by itself when HOME is the workspace: a Python .pth in the user
    // site-packages, bash start-up files, a git hook command, curl and pip config.
    const first = await provider.create(spec(1));
    const plant = String.raw`set -e
h=/workspace
site=$(HOME=$h python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site" $h/.config/pip
echo 'import os; open("/tmp/pwned-pth", "w").close()' > "$site/evil.pth"
echo 'touch /tmp/pwned-bashrc' > $h/.bashrc
echo 'touch /tmp/pwned-profile' > $h/.profile
printf '[core]\n\tfsmonitor = "touch /tmp/pwned-git; false"\n' > $h/.gitconfig
printf 'output = "/tmp/pwned-curl"\n' > $h/.curlrc
printf '[global]\nindex-url = http://pwned.invalid/simple\n' > $h/.config/pip/pip.conf
echo planted`;
    t.equal((await provider.exec(first, plant)).stdout, 'planted\n');
    await provider.destroy(first);
    const triggers = String.raw`echo "HOME=$HOME $(ls -A "$HOME" | wc -l) $(stat -c %U:%a "$HOME")"
python3 -c pass
bash -lc true
bash -ic true < /dev/null 2>/dev/null
git init -q /tmp/repo && git -C /tmp/repo status > /dev/null 2>&1
curl -s file:///etc/hostname > /dev/null
pip config list 2>/dev/null
ls /tmp | grep pwned || true`;
    const second = await provider.create(spec(2));
    const clean = await provider.exec(second, triggers);
    // pip's one setting is the image's own environment (PIP_DISABLE_PIP_VERSION_CHECK).
    t.equal(clean.stdout, "HOME=/home/sandbox 0 root:1777\n:env:.disable-pip-version-check='1'\n", 'nothing ran, no config was read: HOME is a fresh tmpfs, open to the sandbox user');
    t.equal(Buffer.from(await provider.readFile(second, '/workspace/.bashrc')).toString(), 'touch /tmp/pwned-bashrc\n', 'the files themselves are kept');
    await provider.destroy(second);
    // Opted in: HOME is the image's (/workspace), and every one of them takes effect.
    const kept = createDockerSandbox({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, persistentHome: true }, { labels: env.labels });
    const third = await kept.create(spec(3));
    const ran = await kept.exec(third, triggers);
    t.equal(ran.stdout, `HOME=/workspace 6 sandbox:755
:env:.disable-pip-version-check='1'
global.index-url='http://pwned.invalid/simple'
pwned-bashrc
pwned-curl
pwned-git
pwned-profile
pwned-pth
`, 'what the default keeps from running');
    await kept.destroy(third);
  });
});
