/**
 * The socket proxy (capybara-sandbox-proxy:latest) does not start without a usable shared network
 * name: an empty SOCKET_PROXY_SHARED_NETWORK, or one that does not start with "cap" (which could
 * read as a network ID), stops HAProxy at start with a message naming the setting. Nor with a
 * SOCKET_PROXY_VOLUME_DRIVERS entry that is not a plain plugin name (haproxy/proxy-settings.lua),
 * nor without a SOCKET_PROXY_BIND of the operator's (the image has no default listen address), nor with
 * a SOCKET_PROXY_ variable it does not read or a slip of one it does.
 */
import t from 'tap';
import { dockerTest, SOCKET_PROXY_IMAGE, type DockerTestEnv } from '../support/docker.js';
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
    const { starts, logs } = await configCheck(env, `sharednet-${i}`, [`SOCKET_PROXY_SHARED_NETWORK=${row.value}`]);
    t.equal(starts, row.starts, `${row.name}: ${row.starts ? 'starts' : 'refused at start'}`);
    if (!row.starts) t.match(logs, /SOCKET_PROXY_SHARED_NETWORK/, `${row.name}: the message names the setting`);
  }
});

/** A listen address for a config check, which binds nothing. */
const BIND = 'SOCKET_PROXY_BIND=unix@/run/proxy/docker.sock';

t.test('SOCKET_PROXY_BIND is required: the image listens nowhere by default', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const rows = [
    { name: 'unset', vars: [], starts: false },
    { name: 'empty', vars: ['SOCKET_PROXY_BIND='], starts: false },
    { name: 'a unix socket', vars: [BIND], starts: true },
    { name: 'an address the operator chose', vars: ['SOCKET_PROXY_BIND=0.0.0.0:2375'], starts: true },
  ];
  for (const [i, row] of rows.entries()) {
    const { starts, logs } = await configCheck(env, `bind-${i}`, row.vars, false);
    t.equal(starts, row.starts, `${row.name}: ${row.starts ? 'starts' : 'refused at start'}`);
    if (!row.starts) t.match(logs, /SOCKET_PROXY_BIND must be set/, `${row.name}: the message names the setting`);
  }
  // Nor does it declare a port: `docker run -P` publishes every declared one on the host.
  const image = await env.docker.getImage(SOCKET_PROXY_IMAGE).inspect();
  t.same(image.Config.ExposedPorts ?? {}, {}, 'no port declared');
});

/**
 * HAProxy's config check in the image with these variables (and a listen address, unless `bind`
 * is false): a proxy that would start exits 0.
 */
async function configCheck(env: DockerTestEnv, name: string, vars: string[], bind = true): Promise<{ starts: boolean; logs: string }> {
  const c = await env.docker.createContainer({
    name: env.name(name),
    Image: SOCKET_PROXY_IMAGE,
    Cmd: ['haproxy', '-c', '-f', '/etc/haproxy/haproxy.cfg'],
    Env: bind ? [BIND, ...vars] : vars,
    Labels: env.labels,
    HostConfig: { NetworkMode: 'none', CapDrop: ['ALL'], ReadonlyRootfs: true },
  });
  await c.start();
  const { StatusCode } = (await c.wait()) as { StatusCode: number };
  return { starts: StatusCode === 0, logs: (await c.logs({ stdout: true, stderr: true })).toString('utf8') };
}

t.test('SOCKET_PROXY_VOLUME_DRIVERS: plugin names only, or HAProxy does not start', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const rows = [
    { name: 'unset in the image (only local)', value: undefined, starts: true },
    { name: 'two plugin names', value: 'quota,nfs-1.2', starts: true },
    // To dockerd a driver name is the path of its plugin socket under /run/docker/plugins.
    { name: 'a path out of /run/docker/plugins', value: '../../../var/lib/docker/volumes/cap-x/_data/evil', starts: false },
    { name: 'a name with a slash', value: 'vendor/plugin', starts: false },
    { name: 'an empty name in the list', value: 'quota,,nfs', starts: false },
  ];
  for (const [i, row] of rows.entries()) {
    const { starts, logs } = await configCheck(env, `drivers-${i}`, row.value === undefined ? [] : [`SOCKET_PROXY_VOLUME_DRIVERS=${row.value}`]);
    t.equal(starts, row.starts, `${row.name}: ${row.starts ? 'starts' : 'refused at start'}`);
    if (!row.starts) t.match(logs, /SOCKET_PROXY_VOLUME_DRIVERS/, `${row.name}: the message names the setting`);
  }
});

t.test('a misspelt setting stops HAProxy rather than leaving its default in force', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const rows = [
    { name: 'a ceiling one letter short', vars: ['SOCKET_PROXY_MAX_PID=64'], meant: /did you mean SOCKET_PROXY_MAX_PIDS/ },
    { name: 'images in lower case', vars: ['socket_proxy_images=capybara-sandbox:latest'], meant: /did you mean SOCKET_PROXY_IMAGES/ },
    { name: 'a setting the proxy does not have', vars: ['SOCKET_PROXY_ALLOW_ALL=1'], meant: /SOCKET_PROXY_ALLOW_ALL is set, which the socket proxy does not read/ },
    { name: 'an unrelated variable', vars: ['DOCKER_HOST=unix:///var/run/docker.sock'], meant: undefined },
  ];
  for (const [i, row] of rows.entries()) {
    const { starts, logs } = await configCheck(env, `misspelt-${i}`, row.vars);
    t.equal(starts, row.meant === undefined, `${row.name}: ${row.meant === undefined ? 'starts' : 'refused at start'}`);
    if (row.meant !== undefined) t.match(logs, row.meant, `${row.name}: the message names the setting meant`);
  }
});
