/**
 * Transparent egress on the real engine, through the real socket proxy (issue 20, SPEC §2.1): in
 * an allowlist sandbox whose image carries a Node binary, clients with no proxy settings reach
 * the allowlisted server through the sandbox's egress proxy, because the sandbox's name server is
 * that proxy (HostConfig.Dns, forwarded by Docker's embedded DNS) and the proxy answers every
 * allowlisted name with its own address and takes the connection by SNI or Host:
 * - curl (https and http), python3 urllib, Node 20's fetch and git clone (dumb HTTP over https)
 *   get the server's answer, each with a `via: "transparent"` allow line in the egress log;
 * - a name not on the allowlist fails at once (NXDOMAIN, no resolver timeout), with `dns_not_allowed`;
 * - an allowlisted name whose DNS gives a private address is refused `address_not_allowed`;
 * - the explicit proxy (the sandbox's proxy variables) gives the same answers as before;
 * - the sandbox has no IPv6, and tiers `none` and `internal` resolve no name at all.
 *
 * The server is a container on the test's shared network (ICC on there, see sandbox-env.ts),
 * pinned for the egress proxy through egressTestHosts; the Node binary comes from the egress
 * image's base (Debian's node) into a test-only image built FROM the sandbox image, offline.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import pino from 'pino';
import { createDockerSandbox, type SandboxHandle } from '../../../controller/index.js';
import { namesFor } from '../../../controller/spec/index.js';
import { gatewayOf, sandboxTestEnv, SANDBOX_IMAGE, untilListening } from '../../support/sandbox-env.js';
import type { DockerTestEnv } from '../../support/docker.js';
import { opensslUnavailable, selfSignedCert, type TestCert } from '../../support/tls-cert.js';
import { fileNeeds, needUnmet, toolMissing } from '../../support/needs.js';

await fileNeeds(t, 'engine');

const NODE_BASE = 'capybara-base-egress:latest';
const TLS_HOST = 'tls.capybara.test';
/** Allowlisted, not pinned: the egress proxy resolves it (Docker's DNS: a private address). */
const PRIVATE_HOST = 'private.capybara.test';
const UNLISTED_HOST = 'unlisted.capybara.test';
const BODY = 'hello from the transparent upstream';
/** Every proxy variable a client might read: the clients here run with none. */
const NO_PROXY_ENV = 'env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u NO_PROXY -u no_proxy -u ALL_PROXY -u all_proxy';

/**
 * A test-only image: the sandbox image plus Debian's node from the egress base, its libraries
 * beside it (glibc stays the sandbox's own) and its externalised builtins, behind a wrapper on
 * PATH. No registry, no network.
 */
const nodeImageTag = (runId: string): string => `capybara-sandbox-node-test:${runId}`;

function buildNodeImage(env: DockerTestEnv): string {
  const tag = nodeImageTag(env.runId);
  const dockerfile = [
    `FROM ${NODE_BASE} AS node`,
    'RUN mkdir -p /out/opt/node/lib /out/opt/node/bin /out/usr/local/bin && cp /usr/bin/node /out/opt/node/bin/node && ' +
      "ldd /usr/bin/node | awk '$3 ~ /^\\// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\\.so' | xargs -r -I{} cp -L {} /out/opt/node/lib/ && " +
      "printf '#!/bin/sh\\nLD_LIBRARY_PATH=/opt/node/lib exec /opt/node/bin/node \"$@\"\\n' > /out/usr/local/bin/node && chmod 755 /out/usr/local/bin/node",
    `FROM ${SANDBOX_IMAGE}`,
    'COPY --from=node /out/ /',
    // Debian's node loads some of its builtins (undici, the module lexer) from here.
    'COPY --from=node /usr/share/nodejs /usr/share/nodejs',
    ...Object.entries(env.labels).map(([k, v]) => `LABEL ${k}=${v}`),
  ].join('\n');
  execFileSync('docker', ['build', '--quiet', '--pull=false', '--network=none', '-t', tag, '-'], { input: dockerfile, stdio: ['pipe', 'ignore', 'pipe'], env: { ...process.env, DOCKER_BUILDKIT: '0' } });
  return tag;
}

/**
 * The allowlisted server: HTTPS on 443 and HTTP on 80 of the shared network's gateway address (in
 * the host's namespace, bound to that address alone: the shared network keeps inter-container
 * traffic off), serving BODY at / and a bare git repository for dumb-HTTP clones at /repo.git.
 * `private.capybara.test` is the alias of another container on the shared network, so the egress
 * proxy's own DNS gives that name a private address (nothing needs to answer there).
 */
async function startServer(env: DockerTestEnv, network: string, cert: TestCert): Promise<string> {
  const name = env.name('tls-upstream');
  const python = [
    'import functools, http.server, ssl, threading',
    "H = functools.partial(http.server.SimpleHTTPRequestHandler, directory='/tmp/www')",
    "ADDRESS = __import__('os').environ['ADDRESS']",
    'def serve(port, tls):',
    "    s = http.server.ThreadingHTTPServer((ADDRESS, port), H)",
    '    if tls:',
    '        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)',
    "        c.load_cert_chain('/tmp/cert.pem', '/tmp/key.pem')",
    '        s.socket = c.wrap_socket(s.socket, server_side=True)',
    '    s.serve_forever()',
    'threading.Thread(target=serve, args=(80, False), daemon=True).start()',
    'serve(443, True)',
  ].join('\n');
  const gateway = await gatewayOf(env, network);
  const script = [
    'set -e',
    'printf "%s" "$CERT" > /tmp/cert.pem; printf "%s" "$KEY" > /tmp/key.pem',
    `mkdir -p /tmp/www /tmp/src && printf '%s' '${BODY}' > /tmp/www/index.html`,
    'export HOME=/tmp GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t',
    'cd /tmp/src && git init -q -b main && echo "cloned through the egress proxy" > README && git add README && git commit -q -m one',
    'git clone -q --bare /tmp/src /tmp/www/repo.git && git -C /tmp/www/repo.git update-server-info',
    'exec python3 -c "$SERVER"',
  ].join('\n');
  const container = await env.docker.createContainer({
    name,
    Image: SANDBOX_IMAGE,
    User: '0:0',
    Entrypoint: ['bash', '-c', script],
    Env: [`CERT=${cert.cert}`, `KEY=${cert.key}`, `SERVER=${python}`, `ADDRESS=${gateway}`],
    Labels: env.labels,
    HostConfig: { NetworkMode: 'host', CapDrop: ['ALL'], CapAdd: ['NET_BIND_SERVICE'] },
  });
  await container.start();
  const alias = await env.docker.createContainer({
    name: env.name('private-name'),
    Image: SANDBOX_IMAGE,
    Cmd: ['sleep', 'infinity'],
    Labels: env.labels,
    HostConfig: { NetworkMode: network, CapDrop: ['ALL'], ReadonlyRootfs: true },
    NetworkingConfig: { EndpointsConfig: { [network]: { Aliases: [PRIVATE_HOST] } } },
  });
  await alias.start();
  await untilListening(name, gateway, 443);
  return gateway;
}

interface Decision {
  event?: string;
  decision?: string;
  reason?: string;
  host?: string;
  via?: string;
  method?: string;
  qtype?: string;
}

async function egressDecisions(env: DockerTestEnv, container: string): Promise<Decision[]> {
  const raw = await env.docker.getContainer(container).logs({ stdout: true, stderr: true });
  const out: Decision[] = [];
  for (let at = 0; at + 8 <= raw.length; at += 8 + raw.readUInt32BE(at + 4)) {
    for (const line of raw.subarray(at + 8, at + 8 + raw.readUInt32BE(at + 4)).toString('utf8').split('\n')) {
      if (line.startsWith('{')) out.push(JSON.parse(line) as Decision);
    }
  }
  return out.filter((d) => d.event === 'decision');
}

/** The egress proxy writes its log in batches (every 250 ms): waits for a line, at most 5 s. */
async function decisionLogged(env: DockerTestEnv, container: string, after: number, match: (d: Decision) => boolean): Promise<boolean> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    if ((await egressDecisions(env, container)).slice(after).some(match)) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

t.test('transparent egress: clients with no proxy settings reach the allowlist, and only it', async (t) => {
  const noOpenssl = opensslUnavailable();
  if (noOpenssl !== undefined) return needUnmet(t, noOpenssl);
  const s = await sandboxTestEnv(t, (runId) => [nodeImageTag(runId)]);
  if (!s) return;
  const { env } = s;
  const noCli = toolMissing('docker', ['version', '--format', '{{.Client.Version}}'], 'apt-get install docker.io');
  if (noCli !== undefined) return needUnmet(t, noCli);
  if (!(await env.docker.getImage(NODE_BASE).inspect().then(() => true, () => false))) {
    return needUnmet(t, `${NODE_BASE} is not on the engine (bash scripts/build-images.sh egress)`);
  }
  const image = buildNodeImage(env);
  t.teardown(() => env.docker.getImage(image).remove({ force: true }).catch(() => undefined));
  const cert = selfSignedCert([TLS_HOST]);
  // A shared network of this test's own: the server takes ports 80 and 443 of its gateway address,
  // where the environment's upstream already serves 80 on the environment's network.
  const shared = env.name('tp-shared');
  await env.docker.createNetwork({ Name: shared, Driver: 'bridge', Labels: env.labels, CheckDuplicate: true, Options: { 'com.docker.network.bridge.enable_icc': 'false' } });
  const serverIp = await startServer(env, shared, cert);
  const provider = createDockerSandbox(
    { endpoint: s.proxy.endpoint, network: shared, egressIsolation: 'sandbox' },
    { labels: env.labels, egressTestHosts: { [TLS_HOST]: serverIp } },
    { logger: pino({ level: 'silent' }) },
  );
  const id = `${env.runId}-tp`;
  const names = namesFor(`cap-${id}`);
  const started = Date.now();
  const h: SandboxHandle = await provider.create({ id, image, limits: { egress: 'allowlist', allowHosts: [TLS_HOST, PRIVATE_HOST] } });
  t.comment(`create-to-ready (allowlist, transparent): ${Date.now() - started} ms`);
  t.teardown(() => provider.destroy(h).catch(() => undefined));
  const sandbox = await s.inspect(names.container);
  const proxy = await s.inspect(names.egress);
  const proxyAddress = Object.values(proxy.NetworkSettings.Networks).map((n) => n.IPAddress).find((ip) => sandbox.HostConfig.Dns?.includes(ip));
  t.ok(proxyAddress, `the sandbox's name server (${JSON.stringify(sandbox.HostConfig.Dns)}) is its egress proxy's address on the sandbox network`);
  t.ok(sandbox.Config.Env.includes(`HTTPS_PROXY=http://${names.egress}:3128`), 'the proxy variables stay set');
  t.ok(proxy.Config.Env.includes(`EGRESS_TRANSPARENT_LISTEN=${proxyAddress}`), 'the proxy listens in transparent mode on that address');
  await provider.writeFile(h, '/tmp/ca.pem', cert.cert);

  const run = async (command: string): Promise<{ out: string; code: number | null }> => {
    const quoted = `'${command.replace(/'/g, "'\\''")}'`;
    const r = await provider.exec(h, `${NO_PROXY_ENV} bash -c ${quoted}`, { timeoutMs: 60_000 });
    return { out: r.stdout.trim(), code: r.exitCode };
  };
  t.equal((await run('env | grep -ci proxy || true')).out, '0', 'the clients below see no proxy variable');

  await t.test('every client reaches the allowlisted server through the proxy', async (t) => {
    const clients = [
      { name: 'curl https', cmd: `curl -sS --max-time 10 --cacert /tmp/ca.pem https://${TLS_HOST}/`, via: 'tls' },
      { name: 'curl http', cmd: `curl -sS --max-time 10 http://${TLS_HOST}/`, via: 'GET' },
      {
        name: 'python3 urllib',
        cmd: `python3 -c "import ssl, urllib.request; print(urllib.request.urlopen('https://${TLS_HOST}/', context=ssl.create_default_context(cafile='/tmp/ca.pem'), timeout=10).read().decode())"`,
        via: 'tls',
      },
      { name: 'Node fetch', cmd: `NODE_EXTRA_CA_CERTS=/tmp/ca.pem node -e "fetch('https://${TLS_HOST}/').then((r) => r.text()).then((b) => console.log(b))"`, via: 'tls' },
      { name: 'git clone over https', cmd: `GIT_SSL_CAINFO=/tmp/ca.pem HOME=/tmp git clone -q https://${TLS_HOST}/repo.git /tmp/clone && cat /tmp/clone/README`, via: 'tls' },
    ];
    const version = await run('node --version');
    t.match(version.out, /^v\d+\./, `the image carries Node (${version.out})`);
    for (const c of clients) {
      const before = (await egressDecisions(env, names.egress)).length;
      const r = await run(c.cmd);
      t.equal(r.code, 0, `${c.name}: exit 0`);
      t.equal(r.out, c.name.startsWith('git') ? 'cloned through the egress proxy' : BODY, `${c.name}: the server's answer`);
      const logged = await decisionLogged(env, names.egress, before, (d) => d.decision === 'allow' && d.via === 'transparent' && d.host === TLS_HOST);
      t.ok(logged, `${c.name}: an allow line of transparent mode in the egress log`);
    }
  });

  await t.test('a name not on the allowlist fails at once: NXDOMAIN and dns_not_allowed', async (t) => {
    const r = await run(`s=$(date +%s%N); curl -sS --max-time 10 https://${UNLISTED_HOST}/ 2>/dev/null; rc=$?; e=$(date +%s%N); echo "$rc $(( (e - s) / 1000000 ))"`);
    const [code, ms] = r.out.split(' ').map(Number);
    t.equal(code, 6, 'curl: could not resolve host');
    // A lookup that got no answer waits the resolver's 5 s before trying again: under 3 s tells
    // the two apart, with room for a loaded machine (curl's start, dockerd's DNS on the way).
    t.ok((ms ?? Infinity) < 3_000, `failed in ${ms} ms (under 3 s, not after the resolver's 5 s timeout)`);
    const getent = await run(`getent hosts ${UNLISTED_HOST}`);
    t.equal(getent.code, 2, 'getent: the name does not exist');
    const logged = await decisionLogged(env, names.egress, 0, (d) => d.reason === 'dns_not_allowed' && d.host === UNLISTED_HOST && d.method === 'DNS');
    t.ok(logged, 'dns_not_allowed in the egress log, naming the host');
  });

  await t.test('an allowlisted name whose DNS gives a private address is refused address_not_allowed', async (t) => {
    const tls = await run(`curl -sS --max-time 10 -o /dev/null https://${PRIVATE_HOST}/`);
    t.not(tls.code, 0, 'https: no answer from the private address');
    const http = await run(`curl -sS --max-time 10 -o /dev/null -D - http://${PRIVATE_HOST}/`);
    t.match(http.out, /^HTTP\/1\.1 403 /, 'http: 403');
    t.match(http.out, /x-egress-reason: address_not_allowed/i, 'http: the reason header');
    const refused = (d: Decision): boolean => d.reason === 'address_not_allowed' && d.host === PRIVATE_HOST && d.via === 'transparent';
    t.ok(await decisionLogged(env, names.egress, 0, (d) => refused(d) && d.method === undefined), 'the TLS refusal in the egress log');
    t.ok(await decisionLogged(env, names.egress, 0, (d) => refused(d) && d.method === 'GET'), 'the HTTP refusal in the egress log');
  });

  await t.test('the explicit proxy path answers as before', async (t) => {
    const https = await provider.exec(h, `curl -sS --max-time 10 --cacert /tmp/ca.pem https://${TLS_HOST}/`);
    t.equal(https.stdout, BODY, 'https through CONNECT');
    const http = await provider.exec(h, `curl -sS --max-time 10 http://${TLS_HOST}/`);
    t.equal(http.stdout, BODY, 'http through the proxy');
    const refused = await provider.exec(h, `curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://${UNLISTED_HOST}/`);
    t.equal(refused.stdout, '403', 'an unlisted host: 403 from the proxy');
  });

  await t.test('no IPv6, and the proxy\'s own name still resolves', async (t) => {
    t.equal((await run('cat /proc/net/if_inet6 | wc -l')).out, '0', 'no IPv6 address on any interface');
    t.not((await run(`getent ahostsv6 ${TLS_HOST}`)).code, 0, 'no IPv6 answer for an allowlisted name');
    t.equal((await run(`getent hosts ${names.egress} | cut -d' ' -f1`)).out, proxyAddress, 'the egress proxy\'s name: Docker\'s own answer');
  });

  await t.test('tiers none and internal resolve no name at all', async (t) => {
    for (const egress of ['none', 'internal'] as const) {
      const other = await provider.create({ id: `${env.runId}-${egress}`, image, limits: { egress } });
      try {
        t.same((await s.inspect(other.id)).HostConfig.Dns ?? [], [], `${egress}: no name server set`);
        const r = await provider.exec(other, `getent hosts ${TLS_HOST} ${names.egress}; echo "rc=$?"`, { timeoutMs: 60_000 });
        t.match(r.stdout, /^rc=2$/m, `${egress}: neither an allowlisted name nor a container's name resolves`);
      } finally {
        await provider.destroy(other).catch(() => undefined);
      }
    }
  });
});
