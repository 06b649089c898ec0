/**
 * An allowlist too long for one create body (the socket proxy takes at most 32 KiB) is refused
 * before any engine call, naming its count and how many of its entries fit, as measured on the
 * bodies the controller builds; not a body-size error part-way through a create.
 */
import t from 'tap';
import { fakeSandbox } from '../../support/fake-sandbox.js';
import { IMAGES } from '../../../common/index.js';
import { isSandboxError } from '../../../controller/spec/errors.js';
import { parseDeploymentConfig } from '../../../controller/spec/config.js';
import { planSandbox, withAllowHosts } from '../../../controller/spec/sandbox-plan.js';
import { egressContainerBody, sandboxContainerBody } from '../../../controller/docker/container-spec.js';
import { egressRegistration } from '../../../controller/docker/registration-spec.js';

const hosts = (n: number) => Array.from({ length: n }, (_, i) => `host-${String(i).padStart(5, '0')}.example-registry.com`);
const spec = (allowHosts: string[]) => ({ id: 'long', image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts } });
const config = parseDeploymentConfig({ endpoint: 'unix:///nonexistent/fake-engine.sock' });
// Networks are named by id in a create body; the check measures with Docker's longest (64 hex digits).
const NETWORK_ID = 'f'.repeat(64);
const bodyBytes = (allowHosts: string[]) => {
  const plan = withAllowHosts(planSandbox(spec([]), config, { extraLabels: { 'dev.capybara.test': 'fake' } }), allowHosts);
  // The registration as its archive: a header, its content (and a newline) in whole blocks, two end blocks.
  const registration = JSON.stringify(egressRegistration(plan.names, { subnet: '255.255.255.240/28', address: '255.255.255.255' }, allowHosts, 'report', '0'.repeat(36))).length + 1;
  return Math.max(
    JSON.stringify(sandboxContainerBody(plan, NETWORK_ID, '255.255.255.255')).length,
    JSON.stringify(egressContainerBody(plan, NETWORK_ID, undefined, '255.255.255.255')).length,
    512 + Math.ceil(registration / 512) * 512 + 1024,
  );
};

t.test('an allowlist too long for one body is refused at once, with its count and what fits', async (t) => {
  const s = fakeSandbox();
  const list = hosts(2500);
  const err = await s.provider.create(spec(list)).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), String(err));
  const message = (err as Error).message;
  const m = /spec\.limits\.allowHosts has 2500 entries, and the (sandbox container's create body|egress proxy's create body|egress proxy's registration archive) would be (\d+) bytes, over the 32768 bytes the socket proxy accepts in one body; at most (\d+) of these entries fit/.exec(message);
  t.ok(m, message);
  const fit = Number(m?.[3]);
  t.equal(Number(m?.[2]), bodyBytes(list), 'the size is the real body\'s');
  // The count is the real limit: that many entries make bodies that fit, one more does not.
  t.ok(bodyBytes(list.slice(0, fit)) <= 32768, `${fit} entries fit`);
  t.ok(bodyBytes(list.slice(0, fit + 1)) > 32768, `${fit + 1} do not`);
  t.same(s.engine.calls, [], 'no engine call was made (no stale instance removed, nothing half-built)');
  t.comment(`${fit} entries of ${list[0]?.length} characters fit in one create body`);

  const ok = await s.provider.create(spec(list.slice(0, fit)));
  t.equal(ok.id, 'cap-long', 'the most that fit are accepted, and the create goes through');
});

t.test('on the shared egress, and on a warm network, the sandbox\'s body the check let through fits', async (t) => {
  // The labels a create adds for a shard (which one, its isolation) and a warm network (its name)
  // are on the body it sends: measured without them, a spec.env that just fit went over part-way.
  const shared = { endpoint: 'unix:///nonexistent/fake-engine.sock', egressIsolation: 'shared' as const };
  const planned = (env: Record<string, string>) => planSandbox({ ...spec(['pypi.org']), env }, parseDeploymentConfig(shared), { extraLabels: { 'dev.capybara.test': 'fake' } });
  const measured = (env: Record<string, string>) => JSON.stringify(sandboxContainerBody(planned(env), NETWORK_ID, '255.255.255.255')).length;
  // The longest spec.env the check lets through.
  let low = 0;
  let high = 40_000;
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    const fits = await fakeSandbox(shared).provider.create({ ...spec(['pypi.org']), env: { FILL: 'x'.repeat(mid) } }).then(() => true, (e: unknown) => !isSandboxError(e, 'invalid_spec'));
    if (fits) low = mid;
    else high = mid;
  }
  t.ok(measured({ FILL: 'x'.repeat(low) }) <= 32768, `${low} characters pass the check`);
  for (const warmSlots of [0, 1]) {
    const s = fakeSandbox({ ...shared, warmSlots });
    await s.provider.warmUp();
    let sent = 0;
    const create = s.engine.createContainer.bind(s.engine);
    s.engine.createContainer = async (name: string, body: unknown) => {
      if (name === 'cap-long') sent = Buffer.byteLength(JSON.stringify(body));
      return create(name, body);
    };
    await s.provider.create({ ...spec(['pypi.org']), env: { FILL: 'x'.repeat(low) } });
    t.ok(sent > 0 && sent <= 32768, `warmSlots ${warmSlots}: the body sent is ${sent} bytes`);
  }
});
