/**
 * A create whose steps run side by side, failing in one step while another has already made
 * something, on the real engine through the real socket proxy: the error is the failing step's
 * own (its code, naming what failed), and nothing labelled with the sandbox's name is left. The
 * controller's own engine-call log (debug) shows the other step really had succeeded, so each
 * case proves a cleanup, not a race the failure happened to win.
 */
import t, { type Test } from 'tap';
import { Writable } from 'node:stream';
import pino from 'pino';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_HOST, type SandboxTestEnv } from '../../support/sandbox-env.js';
import { createDockerSandbox, isSandboxError, type DeploymentConfigInput, type SandboxSpec } from '../../../controller/index.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

/** Images no engine has and none can pull: their registry is a closed loopback port. */
const MISSING_SANDBOX_IMAGE = '127.0.0.1:9/capybara-missing-sandbox:1';
const MISSING_EGRESS_IMAGE = '127.0.0.1:9/capybara-missing-egress:1';

/** Creates one sandbox with `config` and returns the error and the engine calls that succeeded. */
async function failingCreate(s: SandboxTestEnv, config: Partial<DeploymentConfigInput>, spec: SandboxSpec): Promise<{ err: unknown; succeeded: string[] }> {
  const succeeded: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (line === '') continue;
        const entry = JSON.parse(line) as { msg?: string; call?: string; status?: number };
        if (entry.msg === 'engine call' && entry.status === undefined && entry.call !== undefined) succeeded.push(entry.call);
      }
      done();
    },
  });
  const provider = createDockerSandbox({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'sandbox', ...config }, { labels: s.env.labels }, { logger: pino({ level: 'debug' }, sink) });
  const err = await provider.create(spec).then(() => undefined, (e: unknown) => e);
  return { err, succeeded };
}

function assertFailure(t: Test, err: unknown, code: string, mentions: string): void {
  t.ok(isSandboxError(err), `a SandboxError: ${String(err)}`);
  t.equal((err as { code?: string }).code, code, String(err));
  t.ok((err as Error).message.includes(mentions), `the error names ${mentions}: ${(err as Error).message}`);
}

t.test('a create failing in one concurrent step leaves nothing and names the cause', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const allowlist = (id: string): SandboxSpec => ({ id: `${s.env.runId}-${id}`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });

  await t.test('sandbox image missing while its egress proxy was created', async (t) => {
    const spec = { ...allowlist('noimg'), image: MISSING_SANDBOX_IMAGE };
    const name = `cap-${spec.id}`;
    const { err, succeeded } = await failingCreate(s, {}, spec);
    assertFailure(t, err, 'image_unavailable', MISSING_SANDBOX_IMAGE);
    // Its steps run at once: by the sandbox's failure, the proxy's step had made its policy volume at least.
    t.ok(succeeded.includes(`create of container ${name}-egress`) || succeeded.some((c) => c.includes(`${name}-egress-policy`)), `the egress proxy's step had made something: ${succeeded.join('; ')}`);
    t.same(await s.labelled(name), []);
  });

  await t.test('egress image missing while the internal network was created', async (t) => {
    const spec = allowlist('noegress');
    const name = `cap-${spec.id}`;
    const { err, succeeded } = await failingCreate(s, { egressProxyImage: MISSING_EGRESS_IMAGE }, spec);
    assertFailure(t, err, 'image_unavailable', MISSING_EGRESS_IMAGE);
    t.ok(succeeded.includes(`create of network ${name}-net`), 'the internal network had been created');
    t.same(await s.labelled(name), []);
  });

  await t.test('shared network refused by the socket proxy while volumes were created', async (t) => {
    // Starts with "cap" (the controller accepts it) but is neither "cap-..." nor the proxy's
    // SOCKET_PROXY_SHARED_NETWORK: a controller and socket proxy configured apart.
    const network = `capx${s.env.runId}`;
    const spec = allowlist('refused');
    const name = `cap-${spec.id}`;
    const { err, succeeded } = await failingCreate(s, { network }, spec);
    assertFailure(t, err, 'engine_refused', network);
    t.ok(succeeded.includes(`create of volume ${name}-skills`), 'a volume had been created');
    t.same(await s.labelled(name), []);
  });
});
