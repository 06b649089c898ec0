/**
 * deploy/compose.yaml keeps the socket proxy where SECURITY.md wants it: no published port, only
 * on an internal network shared with the host application, the engine socket mounted, and the
 * container hardened; the project's networks cannot start with "cap", and the controller and
 * the socket proxy agree on the shared sandbox network. (compose-deployment.test.ts starts it.)
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

interface Service {
  image?: string;
  ports?: unknown;
  expose?: unknown;
  network_mode?: string;
  environment?: Record<string, string>;
  volumes?: Array<{ type?: string; source?: string; target?: string; read_only?: boolean } | string>;
  networks?: string[] | Record<string, unknown>;
  cap_drop?: string[];
  cap_add?: string[];
  security_opt?: string[];
  read_only?: boolean;
  privileged?: boolean;
  logging?: { driver?: string; options?: Record<string, string> };
}

const compose = parse(readFileSync(fileURLToPath(new URL('../../deploy/compose.yaml', import.meta.url)), 'utf8')) as {
  name?: string;
  services: Record<string, Service>;
  networks: Record<string, { internal?: boolean; driver_opts?: Record<string, string> } | null>;
};
const networksOf = (s: Service): string[] => (Array.isArray(s.networks) ? s.networks : Object.keys(s.networks ?? {}));
const proxy = compose.services['socket-proxy'] as Service;
const app = compose.services.capybara as Service;

t.test('the socket proxy publishes nothing', async (t) => {
  t.ok(proxy, 'socket-proxy service exists');
  t.equal(proxy.image, '${CAPYBARA_PROXY_IMAGE:-capybara-sandbox-proxy:latest}');
  t.equal(proxy.ports, undefined, 'no ports:');
  t.equal(proxy.network_mode, undefined, 'not on the host network');
});

t.test('the proxy is only on internal networks, shared with the app', async (t) => {
  const nets = networksOf(proxy);
  t.ok(nets.length > 0);
  for (const net of nets) t.equal(compose.networks[net]?.internal, true, `${net} is internal: true`);
  // An internal bridge still has its gateway address on the host, through which any local user
  // reached the listener: none on the proxy's networks.
  for (const net of nets) {
    t.equal(compose.networks[net]?.driver_opts?.['com.docker.network.bridge.inhibit_ipv4'], 'true', `${net} has no host address`);
  }
  t.ok(nets.every((n) => networksOf(app).includes(n)), 'the app joins the proxy network');
});

t.test('socket mounted and the proxy configured', async (t) => {
  const env = proxy.environment ?? {};
  t.match(env.SOCKET_PROXY_BIND, /^0\.0\.0\.0:\d+$/);
  const socket = (proxy.volumes ?? []).find((v) => typeof v === 'object' && v.target === env.DOCKER_SOCKET);
  t.same(socket && typeof socket === 'object' ? [socket.type, socket.source] : [], ['bind', '/var/run/docker.sock']);
  t.equal((proxy.volumes ?? []).length, 1, 'nothing else mounted');
  const port = env.SOCKET_PROXY_BIND?.split(':')[1];
  t.match(JSON.stringify(app.environment ?? {}), `tcp://socket-proxy:${port}`, 'the app points endpoint at the proxy');
});

t.test('the proxy is hardened', async (t) => {
  t.same(proxy.cap_drop, ['ALL']);
  t.equal(proxy.cap_add, undefined);
  t.ok(proxy.security_opt?.some((o) => /^no-new-privileges(:true)?$/.test(o)));
  t.equal(proxy.read_only, true);
  t.not(proxy.privileged, true);
});

t.test('no network of the project can start with cap', async (t) => {
  t.equal(compose.name, undefined, 'no top-level name: docker-compose 1.29 refuses it; deploy/.env names the project');
  const dotenv = readFileSync(fileURLToPath(new URL('../../deploy/.env', import.meta.url)), 'utf8');
  const project = /^COMPOSE_PROJECT_NAME=(.+)$/m.exec(dotenv)?.[1] ?? '';
  t.match(project, /^[a-z0-9][a-z0-9_-]*$/, 'a valid project name');
  t.notOk(project.startsWith('cap'), `${project}_<network> does not start with "cap"`);
});

t.test('controller and socket proxy name the same shared network', async (t) => {
  const shared = proxy.environment?.SOCKET_PROXY_SHARED_NETWORK;
  t.equal(shared, '${CAPYBARA_SANDBOX_NETWORK:-capybara-sandbox}');
  const config = JSON.parse(app.environment?.CAPYBARA_EXTENSION_CONFIG ?? '{}') as Record<string, { network?: string }>;
  t.equal(config['sandbox-docker']?.network, shared);
});

t.test('controller and socket proxy name the same volume plugin, by default none', async (t) => {
  const drivers = proxy.environment?.SOCKET_PROXY_VOLUME_DRIVERS;
  t.equal(drivers, '${CAPYBARA_VOLUME_DRIVER:-}');
  const config = JSON.parse(app.environment?.CAPYBARA_EXTENSION_CONFIG ?? '{}') as Record<string, { volumeDriver?: string }>;
  t.equal(config['sandbox-docker']?.volumeDriver, drivers, 'one variable for both: the plugin the controller uses is the one the proxy admits');
});

t.test('both services cap their logs', async (t) => {
  for (const [name, service] of [['socket-proxy', proxy], ['capybara', app]] as const) {
    t.same(service.logging, { driver: 'json-file', options: { 'max-size': '10m', 'max-file': '3' } }, name);
  }
});
