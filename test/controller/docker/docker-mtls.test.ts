/**
 * The controller against a remote engine over mutual TLS, for real: a second dockerd started
 * by this test listens with --tlsverify on a loopback port (its own data root, exec root and
 * socket), and the provider drives a sandbox lifecycle over it with client certificates read
 * from a tlsCertDir. Clients without a certificate, with one from another CA, with an expired
 * one, or that do not trust the engine are refused with `engine_tls`.
 *
 * Needs (support/needs.ts: skip outside CI, fail under CI) the machine's engine and the sandbox
 * image, root, dockerd, ip and openssl, and a second engine that comes up.
 */
import t from 'tap';
import { connect } from 'node:tls';
import { existsSync, readFileSync } from 'node:fs';
import { dockerTest } from '../../support/docker.js';
import { fileNeeds, needUnmet } from '../../support/needs.js';
import { SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { makeTestPki, pkiUnsupported, type TestPki } from '../../support/test-certs.js';
import { secondEngineUnsupported, startSecondEngine, type SecondEngine } from '../../support/second-engine.js';
import { createDockerSandbox, isSandboxError } from '../../../controller/index.js';

await fileNeeds(t, 'engine');

t.test('sandbox lifecycle over mTLS to a second engine', async (t) => {
  const env = await dockerTest(t, [SANDBOX_IMAGE]);
  if (!env) return;
  const unsupported = secondEngineUnsupported() ?? pkiUnsupported();
  if (unsupported !== null) return needUnmet(t, unsupported);

  // The machine engine's default bridge must outlive the second engine (dockerd --bridge=none
  // deletes the host's docker0 at start).
  const docker0Before = existsSync('/sys/class/net/docker0');
  const pki: TestPki = makeTestPki();
  t.teardown(() => pki.remove());
  let engine: SecondEngine;
  const startedAt = Date.now();
  try {
    engine = await startSecondEngine({ caCert: pki.caCert, serverCert: pki.serverCert, serverKey: pki.serverKey });
  } catch (err) {
    return needUnmet(t, `a second dockerd could not start on this machine: ${(err as Error).message}`);
  }
  t.teardown(() => engine.stop());
  t.equal(existsSync('/sys/class/net/docker0'), docker0Before, 'the machine engine keeps its docker0 while a second engine runs');
  t.comment(`second dockerd up in ${Date.now() - startedAt} ms on 127.0.0.1:${engine.port}`);

  // Only the sandbox image is needed: the none tier has no egress proxy and no network.
  const loadStarted = Date.now();
  const saved = await env.docker.getImage(SANDBOX_IMAGE).get();
  const loading = await engine.docker.loadImage(saved);
  await new Promise<void>((resolve, reject) => engine.docker.modem.followProgress(loading, (err: unknown) => (err ? reject(err) : resolve())));
  t.comment(`${SANDBOX_IMAGE} loaded into the second engine in ${Date.now() - loadStarted} ms`);

  const endpoint = `tcp://127.0.0.1:${engine.port}`;
  const spec = { id: `${env.runId}-mtls`, image: SANDBOX_IMAGE, limits: { egress: 'none' as const } };

  await t.test('lifecycle with a client certificate from the engine CA', async (t) => {
    const provider = createDockerSandbox({ endpoint, tlsCertDir: pki.clients.good }, { labels: env.labels });
    const started = Date.now();
    const h = await provider.create(spec);
    t.comment(`create over mTLS: ${Date.now() - started} ms`);
    t.equal(h.id, `cap-${spec.id}`);
    const r = await provider.exec(h, 'echo "$(id -u) hello"; echo err >&2; exit 3');
    t.same([r.exitCode, r.stdout, r.stderr], [3, '1000 hello\n', 'err\n']);
    await provider.writeFile(h, 'note.txt', 'over mTLS');
    t.equal(Buffer.from(await provider.readFile(h, 'note.txt')).toString(), 'over mTLS');
    await provider.suspend(h);
    t.equal((await engine.docker.getContainer(h.id).inspect()).State.Running, false, 'suspended');
    t.equal(await provider.resume(h), 'running');
    t.equal(Buffer.from(await provider.readFile(h, '/workspace/note.txt')).toString(), 'over mTLS', 'workspace survives suspend');
    await provider.destroy(h);
    t.equal(await provider.resume(h), 'gone');
    const left = [
      ...(await engine.docker.listContainers({ all: true })).map((c) => c.Names.join(',')),
      ...((await engine.docker.listVolumes()).Volumes ?? []).map((v) => v.Name),
    ];
    t.same(left, [], 'nothing left on the second engine');
  });

  const refusals = [
    { name: 'no tlsCertDir (plain HTTP to the TLS port)', tlsCertDir: undefined, expect: /requires TLS.*tlsCertDir/ },
    { name: 'client certificate from another CA', tlsCertDir: pki.clients.otherCa, expect: /cert\.pem is issued by .*unrelated test CA/ },
    { name: 'expired client certificate', tlsCertDir: pki.clients.expired, expect: /cert\.pem expired on 2020-01-02/ },
    { name: 'ca.pem does not trust the engine', tlsCertDir: pki.clients.wrongCa, expect: /certificate .* is not trusted/ },
  ];
  for (const row of refusals) {
    await t.test(`refused: ${row.name}`, async (t) => {
      const provider = createDockerSandbox({ endpoint, ...(row.tlsCertDir === undefined ? {} : { tlsCertDir: row.tlsCertDir }) }, { labels: env.labels });
      try {
        await provider.create({ ...spec, id: `${env.runId}-refused` });
        t.fail('create succeeded');
      } catch (err) {
        t.ok(isSandboxError(err, 'engine_tls'), `engine_tls, got ${String(err)}`);
        t.match((err as Error).message, row.expect, 'the message names what to check');
      }
    });
  }

  await t.test('the engine refuses a TLS client that presents no certificate', async (t) => {
    const outcome = await new Promise<string>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port: engine.port, ca: readFileSync(pki.caCert) }, () => {
        socket.write('GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n');
      });
      let answer = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => { answer += chunk; });
      socket.on('error', (err: NodeJS.ErrnoException) => resolve(`error ${err.code ?? err.message}`));
      socket.on('close', () => resolve(answer === '' ? 'closed' : `answered ${answer.split('\r\n')[0]}`));
      socket.setTimeout(10_000, () => { socket.destroy(); resolve('timeout'); });
    });
    t.match(outcome, /^(error|closed)/, outcome);
    // dockerd writes the line after the handshake fails, which can be after the client saw the close.
    const refusal = /client didn't provide a certificate/;
    for (const deadline = Date.now() + 5_000; !refusal.test(engine.log()) && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 100));
    t.match(engine.log(), refusal, 'dockerd logged the refusal');
  });

  t.same((await engine.docker.listContainers({ all: true })).length, 0, 'no container left by the refused clients');
});
