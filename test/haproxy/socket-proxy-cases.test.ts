/**
 * Every case of fixtures/socket-proxy-cases.json against the real engine behind the real socket
 * proxy (capybara-sandbox-proxy:latest): allowed requests must reach Docker, refused ones must get
 * the proxy's 403 with exactly the reason the case names (or HAProxy's own 400 for broken framing,
 * where the case says so) and leave nothing behind in Docker. The exact reason is what proves a
 * case tests its own rule: a body refused by some earlier, unrelated rule would hide the one the
 * case is about.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type Docker from 'dockerode';
import type { Test } from 'tap';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE, TEST_LOCAL_IMAGE } from '../support/docker.js';
import { send, readExecStream, type RawResponse } from './raw-http.js';
import { fileNeeds, needUnmet } from '../support/needs.js';
import { loopbackName, loopbackNameProblem } from '../support/loopback-name.js';
import { TENANTS_DIR } from '../../common/index.js';

await fileNeeds(t, 'engine');

interface Case {
  id: string;
  grp: string;
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
  body: string | null;
  verdict: 'allow' | '403';
  /** For a 403: the X-Socket-Proxy-Deny reason. */
  deny?: string;
  /** For a refusal HAProxy answers itself (broken framing): its status; with `deny`, the status of the proxy's answer other than 403. */
  status?: number;
  why: string;
  raw?: string;
}

const fixture = JSON.parse(readFileSync(new URL('./fixtures/socket-proxy-cases.json', import.meta.url), 'utf8')) as {
  cases: Case[];
};
/** Stands in for the corpus's "test-node:1": a small local trixie image with /usr/bin/node. */
const TEST_NODE_IMAGE = TEST_LOCAL_IMAGE;

/** Statuses Docker itself must answer for the legit group (where they are deterministic here). */
const EXPECTED_STATUS: Record<string, number[]> = {
  A01: [200], A02: [200], A03: [200], A04: [200], A05: [200],
  A08: [201], A09: [200], A10: [201], A11: [200], A12: [201], A13: [200], A32: [201], A33: [200], A31: [200], A14: [204],
  A15: [201], A16: [101], A17: [200], A28: [201], A29: [101],
  A18: [204], A19: [204], A20: [204], A21: [409, 500], A22: [201, 400], A23: [204], A24: [204, 404], A34: [204],
  A25: [204], A26: [204], A27: [404],
  K10: [201], T19: [201], T21: [201], T22: [201], T58: [404], T61: [404], T82: [404],
  R01: [201], R02: [200],
};

t.test('socket proxy cases against the real engine', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE, TEST_NODE_IMAGE]);
  if (!env) return;
  // The deployment's shared network: starts "cap" but not "cap-", so only the exact-name rule admits it.
  const sharedNetwork = `capshared${env.runId}`;
  const noRoot = loopbackNameProblem();
  if (noRoot !== undefined) return needUnmet(t, noRoot);
  // The listed registry: a name of this run's that resolves to loopback, on a port nothing serves.
  const registry = `${await loopbackName(t, env.runId)}:9`;
  // A volume plugin the operator named: only exactly this name passes besides "local"; one image,
  // the test's small local one, and one registry.
  const proxy = await startSocketProxy(t, env, { sharedNetwork, volumeDrivers: 'capytestdriver', images: [TEST_NODE_IMAGE], registries: registry });

  // A network whose name does not start with "cap": its ID is what F40/H08 try to smuggle in.
  const other = await env.docker.createNetwork({ Name: `other${env.runId}`, Labels: env.labels, Internal: true });
  // A cap network that cases name by its id.
  const capNet = await env.docker.createNetwork({ Name: `cap-${env.runId}-idnet`, Labels: env.labels, Internal: true });
  const vars: Record<string, string> = {
    P: `cap-${env.runId}`, R: env.runId, IMAGE: TEST_NODE_IMAGE, OTHER_NET_ID: other.id,
    CAP_NET_ID: capNet.id, CAP_NET_ID_UPPER: capNet.id.toUpperCase(),
    EXEC_ID: '0'.repeat(64), STDIN_EXEC_ID: '0'.repeat(64), SHARED: sharedNetwork, REGISTRY: registry,
  };
  const fill = (s: string) => s.replace(/\{([A-Z_]+)\}/g, (m, k: string) => vars[k] ?? m);
  const created = new Set<string>([proxy.container, `other${env.runId}`, `cap-${env.runId}-idnet`]);

  for (const c of fixture.cases) {
    const req = {
      method: c.method,
      path: fill(c.path),
      headers: Object.fromEntries(Object.entries(c.headers).map(([k, v]) =>
        [k, Array.isArray(v) ? v.map(fill) : fill(v)])),
      body: c.body === null ? null : fill(c.body),
      ...(c.raw !== undefined ? { raw: fill(c.raw) } : {}),
    };
    const started = Date.now();
    const res = await send(proxy.socketPath, req);
    if (Date.now() - started > 1000) t.comment(`${c.id} took ${Date.now() - started}ms`);
    const label = `${c.id} ${c.method} ${req.path.slice(0, 90)}: ${c.why}`;
    const denied = res.headers['x-socket-proxy-deny'];

    if (c.verdict === 'allow') {
      t.notOk(denied, `${label}: reaches Docker (proxy said ${denied ?? 'nothing'})`);
      t.ok(res.status === 101 || res.headers['api-version'], `${label}: answered by Docker (status ${res.status})`);
      const expected = EXPECTED_STATUS[c.id];
      if (expected) {
        t.ok(expected.includes(res.status),
          `${label}: Docker status ${res.status} in ${expected.join('/')} (${res.body.toString('utf8').slice(0, 200)})`);
      }
      await followUp(c, res, vars, t);
      for (const n of createdNames(c, req.path, req.body)) created.add(n);
    } else {
      if (c.deny !== undefined) {
        // A network id that names nothing is answered 404 (as dockerd would), by the proxy.
        t.same([res.status, denied], [c.status ?? 403, c.deny], `${label}: refused with ${c.deny}`);
      } else {
        t.same([res.status, denied], [c.status, undefined], `${label}: HAProxy itself answers ${String(c.status)}`);
      }
      t.notOk(res.headers['api-version'], `${label}: Docker never saw it`);
      for (const n of createdNames(c, req.path, req.body)) {
        t.notOk(await exists(env.docker, n), `${label}: ${n} does not exist afterwards`);
      }
    }
  }

  await registrationsWritten(env.docker, vars, t);

  // Nothing but what the allowed cases made carries this run's id.
  const leftovers = await namesWithRunId(env.docker, env.runId);
  const unexpected = leftovers.filter((n) => !created.has(n));
  t.same(unexpected, [], 'no resource appeared that an allowed case did not create');
});

/** Exec create answers give the ids later cases use; hijacked exec starts must carry the stream. */
async function followUp(c: Case, res: RawResponse, vars: Record<string, string>, t: Test) {
  if (c.id === 'A15' || c.id === 'A28') {
    const id = (JSON.parse(res.body.toString('utf8')) as { Id: string }).Id;
    vars[c.id === 'A15' ? 'EXEC_ID' : 'STDIN_EXEC_ID'] = id;
  }
  if (c.id === 'A16' && res.upgraded) {
    const out = await readExecStream(res.upgraded);
    t.equal(out.stdout, '42\n', 'A16: stdout of the hijacked exec comes back');
  }
  if (c.id === 'A29' && res.upgraded) {
    const out = await readExecStream(res.upgraded, Buffer.from('hello through the proxy'));
    t.equal(out.stdout, 'echo:hello through the proxy', 'A29: stdin reaches the process and its echo comes back');
  }
  if (res.upgraded && !['A16', 'A29'].includes(c.id)) res.upgraded.socket.destroy();
}

/**
 * The egress container's registration directory after the tenants group: exactly the one file the
 * allowed registration (R02) wrote, with its content; nothing any refused case sent.
 */
async function registrationsWritten(docker: Docker, vars: Record<string, string>, t: Test) {
  const allowed = fixture.cases.find((c) => c.id === 'R02');
  if (allowed?.body == null) return t.fail('R02 is in the fixture');
  const stream = await docker.getContainer(`${vars.P}-r1-egress`).getArchive({ path: TENANTS_DIR });
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  const archive = Buffer.concat(chunks);
  const list = spawnSync('tar', ['-t', '-f', '-'], { input: archive });
  t.same(list.stdout.toString('utf8').split('\n').filter((l) => l !== '').sort(), ['tenants/', 'tenants/s0.json'], 'R02 wrote one file; no refused case wrote anything');
  const sent = Buffer.from(allowed.body, 'latin1');
  const size = parseInt(sent.subarray(124, 135).toString('latin1'), 8);
  const content = spawnSync('tar', ['-xO', '-f', '-', 'tenants/s0.json'], { input: archive });
  t.equal(content.stdout.toString('utf8'), sent.subarray(512, 512 + size).toString('utf8'), 'the file holds the registration as sent');
}

/** Names a create request would give its container, volume or network. */
function createdNames(c: Case, path: string, body: string | null): string[] {
  if (c.method.toUpperCase() !== 'POST') return [];
  const names: string[] = [];
  const q = /\/containers\/create\?(?:.*&)?name=([^&;]+)/.exec(path);
  if (q?.[1]) names.push(decodeURIComponent(q[1]));
  // A volume mount names a volume that Docker creates when it does not exist yet.
  if (q?.[1] && body) {
    for (const m of body.matchAll(/"source"\s*:\s*"([a-zA-Z0-9][a-zA-Z0-9_.-]*)"/gi)) if (m[1]) names.push(m[1]);
  }
  if (/\/(volumes|networks)\/create/.test(path) && body) {
    for (const m of body.matchAll(/"name"\s*:\s*"([^"]*)"/gi)) if (m[1]) names.push(m[1]);
  }
  return names;
}

async function exists(docker: Docker, name: string): Promise<boolean> {
  const probes = [
    docker.getContainer(name).inspect(),
    docker.getVolume(name).inspect(),
    docker.getNetwork(name).inspect(),
  ];
  const results = await Promise.allSettled(probes);
  return results.some((r) => r.status === 'fulfilled');
}

async function namesWithRunId(docker: Docker, runId: string): Promise<string[]> {
  const filters = { name: [runId] };
  const containers = (await docker.listContainers({ all: true, filters })).flatMap((c) => c.Names.map((n) => n.replace(/^\//, '')));
  const networks = (await docker.listNetworks({ filters })).map((n) => n.Name);
  const volumes = ((await docker.listVolumes({ filters })).Volumes ?? []).map((v) => v.Name);
  return [...containers, ...networks, ...volumes].sort();
}
