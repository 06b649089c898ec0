/**
 * Where each deployment keeps the deployment CA, checked offline: the egress image makes the CA
 * directory the proxy's user's own with mode 0700 (what ca-store.ts demands, and what a named
 * volume copies), the egress compose file keeps it in a named volume that no other service mounts,
 * and the Kubernetes proxy takes EGRESS_CA_INLINE from an optional Secret (shared by its replicas).
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { parse } from 'yaml';
import { EGRESS_ENV } from '../../common/index.js';
import { DEFAULT_CA_DIR } from '../../proxy/inspect/index.js';
import { findIn, plainManifests, type Manifest } from './kubernetes-manifests.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const read = (path: string): string => readFileSync(join(root, path), 'utf8');

t.test('the egress image makes the CA directory, the proxy user\'s own, 0700', async (t) => {
  const dockerfile = read('image/egress/Dockerfile');
  const user = /^USER (\S+)$/m.exec(dockerfile)?.[1];
  t.equal(user, 'egress');
  t.match(dockerfile, new RegExp(`^RUN install -d -o ${user} -g ${user} -m 0700 ${DEFAULT_CA_DIR}$`, 'm'));
});

t.test('the egress compose file keeps the CA in a named volume only the proxy mounts', async (t) => {
  const compose = parse(read('deploy/egress/compose.yaml')) as { services: Record<string, { volumes?: Array<{ type: string; source: string; target: string }> }>; volumes: Record<string, unknown> };
  const mounts = Object.entries(compose.services).flatMap(([service, s]) => (s.volumes ?? []).map((v) => ({ service, ...v })));
  const ca = mounts.filter((m) => m.target === DEFAULT_CA_DIR);
  t.same(ca.map((m) => [m.service, m.type]), [['egress', 'volume']], 'the egress service, a named volume');
  t.ok(ca[0] && ca[0].source in compose.volumes, 'declared at the top');
  t.same(mounts.filter((m) => m.source === ca[0]?.source).length, 1, 'no other service mounts it');
});

t.test('the Kubernetes proxy takes EGRESS_CA_INLINE from the optional Secret capybara-egress-ca', async (t) => {
  const deployment = findIn(plainManifests().map((d) => d.doc), 'Deployment', 'capybara-egress');
  const container = deployment.spec.template.spec.containers[0];
  const inline = container.env.find((e: Manifest) => e.name === EGRESS_ENV.caInline);
  t.same(inline?.valueFrom, { secretKeyRef: { name: 'capybara-egress-ca', key: EGRESS_ENV.caInline, optional: true } });
  t.notOk(inline?.value, 'never a value written into the manifest');
  t.match(read('deploy/kubernetes/egress-proxy.yaml'), /capybara-egress ca --inline/, 'the comment says how to make it');
});
