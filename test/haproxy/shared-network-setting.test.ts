/**
 * The socket proxy (capybara-sandbox-proxy:latest) does not start without a usable shared network
 * name: an empty SOCKET_PROXY_SHARED_NETWORK, or one that does not start with "cap" (which could
 * read as a network ID), stops HAProxy at start with a message naming the setting.
 */
import t from 'tap';
import { dockerTest, SOCKET_PROXY_IMAGE } from '../support/docker.js';
import { fileNeeds } from '../support/needs.js';

await fileNeeds(t, 'engine');

t.test('SOCKET_PROXY_SHARED_NETWORK is required and must start with cap', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const rows = [
    { name: 'empty', value: '', starts: false },
    { name: 'the default bridge', value: 'bridge', starts: false },
    { name: 'cap only inside the name', value: 'x-cap', starts: false },
    { name: 'the default', value: 'capybara-sandbox', starts: true },
  ];
  for (const [i, row] of rows.entries()) {
    const c = await env.docker.createContainer({
      name: env.name(`sharednet-${i}`),
      Image: SOCKET_PROXY_IMAGE,
      // Only the config check: a proxy that would start exits 0 here instead of serving.
      Cmd: ['haproxy', '-c', '-f', '/etc/haproxy/haproxy.cfg'],
      Env: [`SOCKET_PROXY_SHARED_NETWORK=${row.value}`],
      Labels: env.labels,
      HostConfig: { NetworkMode: 'none', CapDrop: ['ALL'], ReadonlyRootfs: true },
    });
    await c.start();
    const { StatusCode } = (await c.wait()) as { StatusCode: number };
    const logs = (await c.logs({ stdout: true, stderr: true })).toString('utf8');
    t.equal(StatusCode === 0, row.starts, `${row.name}: ${row.starts ? 'starts' : 'refused at start'}`);
    if (!row.starts) t.match(logs, /SOCKET_PROXY_SHARED_NETWORK/, `${row.name}: the message names the setting`);
  }
});
