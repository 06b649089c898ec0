/**
 * Unread downloads cannot get the proxy killed: the `capybara-egress` command runs in a real
 * memory cgroup of 256 MiB (the compose recipe's limit), and four client addresses each open 900
 * tunnels to a server that streams, and read none of them. Four, because one client's connection
 * share (a quarter of the total) alone would stay below the limit even uncharged. Before tunnel
 * bytes were charged, each such tunnel held ~100 KiB and the kernel's OOM killer ended the
 * process at ~2,400; now each client's oldest stalled tunnels are closed past its share, and the
 * heaviest client's past the total, the process lives, the health check answers, and another
 * client's download flows. Needs root and a memory cgroup it may create (skipped, with
 * the reason, elsewhere). Loopback only. The figures at 256 MiB: `npm run bench:load`.
 */
import { spawn } from 'node:child_process';
import { writeFileSync, rmSync, mkdtempSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { inCgroup, makeCgroup, type Cgroup } from '../../bench/load-support.js';
import { EGRESS_CLI, EGRESS_BASE_ENV, plainNode } from '../support/plain-node.js';
import { freePort, streamingServer } from '../support/loopback.js';
import { needUnmet } from '../support/needs.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';

const LIMIT_BYTES = 256 * 1024 * 1024;
/** Four addresses, together past the total of connections the memory plan allows. */
const ATTACKERS = ['127.0.0.2', '127.0.0.4', '127.0.0.5', '127.0.0.6'];
const TUNNELS_EACH = 900;
const KIB = 1024;

let cgroup: Cgroup | undefined;
try {
  cgroup = process.getuid?.() === 0 ? makeCgroup('test-shares', LIMIT_BYTES) : undefined;
} catch {
  cgroup = undefined;
}

t.test('3,600 unread streaming tunnels from four clients in a 256 MiB cgroup: the proxy lives and serves another client', async (t) => {
  if (cgroup === undefined) return needUnmet(t, 'root and a memory cgroup it may create (/sys/fs/cgroup/memory or cgroup v2)');
  const group = cgroup;
  const upstream = await streamingServer();
  const upPort = upstream.port;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cgroup-shares-'));
  const policy = path.join(dir, 'policy.yaml');
  writeFileSync(policy, `version: 1\nallowHosts:\n  - host: stream.test\n    tunnel: opaque\nconnectPorts: [${upPort}]\n`);
  const port = await freePort();
  const [command, args] = plainNode(EGRESS_CLI, ['--policy', policy, '--listen', `127.0.0.1:${port}`, '--log-level', 'warn']);
  // The proxy plans its memory from the cgroup's limit.
  const proxy = spawn(...inCgroup(group, [command, ...args], 65_536), {
    env: { ...EGRESS_BASE_ENV, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'stream.test': '127.0.0.1' }) },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const tunnels: net.Socket[] = [];
  t.teardown(async () => {
    for (const s of tunnels) s.destroy();
    proxy.kill('SIGKILL');
    upstream.close();
    rmSync(dir, { recursive: true, force: true });
    await settle(() => proxy.exitCode !== null || proxy.signalCode !== null, 'the proxy gone', 10_000);
    group.remove();
  });
  const alive = (): boolean => proxy.exitCode === null && proxy.signalCode === null;
  for (let i = 0; ; i++) {
    const health = await rawRequest(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n').catch(() => undefined);
    if (health?.status === 200) break;
    if (i > 100 || !alive()) return t.fail('the proxy did not start');
    await new Promise((r) => setTimeout(r, 100));
  }

  const answers = new Map<string, number>();
  for (let i = 0; i < TUNNELS_EACH && alive(); i += 25) {
    await Promise.all(
      ATTACKERS.flatMap((localAddress) => Array.from({ length: 25 }, () => localAddress)).map(async (localAddress) => {
        const s = net.connect({ port, host: '127.0.0.1', localAddress });
        s.on('error', () => undefined);
        tunnels.push(s);
        s.write(`CONNECT stream.test:${upPort} HTTP/1.1\r\n\r\n`);
        const head = await readUntil(s, '\r\n\r\n', 5_000).catch(() => '');
        const status = /^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 'none';
        answers.set(status, (answers.get(status) ?? 0) + 1);
        // Nothing more is read: the download backs up into the proxy.
        s.pause();
      }),
    );
  }
  await new Promise((r) => setTimeout(r, 2_000));
  const seen = JSON.stringify(Object.fromEntries(answers));
  t.ok(alive(), `the proxy is alive after ${ATTACKERS.length * TUNNELS_EACH} unread tunnels (answers: ${seen})`);
  t.equal(group.oomKills(), 0, 'no OOM kill in the cgroup');
  t.ok((answers.get('200') ?? 0) >= 800, `the clients were served until their shares were full (${seen})`);
  const health = await rawRequest(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(health.status, 200, '/healthz answers');

  const other = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.3' });
  t.teardown(() => other.destroy());
  other.write(`CONNECT stream.test:${upPort} HTTP/1.1\r\n\r\n`);
  t.match(await readUntil(other, '\r\n\r\n'), /^HTTP\/1\.1 200 /, 'another client opens a tunnel');
  let received = 0;
  other.on('data', (d: Buffer) => (received += d.length));
  await settle(() => received >= 8 * 1024 * KIB, "and its download flows", 10_000);
  t.ok(group.peak() < LIMIT_BYTES, `the cgroup's peak stayed below its limit (${(group.peak() / 2 ** 20).toFixed(1)} MiB)`);
});
