/**
 * The kustomize base and its example overlay, rendered by `kubectl kustomize` (docs/kubernetes.md).
 * The base renders the same objects as the plain files, compared as data, so `kubectl apply -k
 * deploy/kubernetes` and `kubectl apply -f` on the files stay the same deployment; the overlay,
 * which writes the DNS address in one place, renders the new address in every place that names
 * it and the old one nowhere; and both renders pass the offline schema check of the plain files.
 *
 * kubectl is part of the machine's image or absent: no package source .ci/run uses has it, so
 * without it these tests skip everywhere, CI included, saying so (test/support/needs.ts).
 */
import t, { type Test } from 'tap';
import { isDeepStrictEqual } from 'node:util';
import { kustomizeMissing, platformCannot } from '../support/needs.js';
import { BASE_DIR, findIn, kustomize, objectKey, OVERLAY_DIR, plainManifests, schemaProblems, type Manifest } from './kubernetes-manifests.js';

const missing = kustomizeMissing();
const OLD_ADDRESS = '10.96.0.53';

/** Every place the egress Service's address is written, read from a set of objects. */
function addressCopies(docs: readonly Manifest[]): Record<string, unknown> {
  const deployment = findIn(docs, 'Deployment', 'capybara-egress');
  const pod = findIn(docs, 'Pod', 'example-workload');
  const env = (container: Manifest, name: string): unknown => container.env.find((e: Manifest) => e.name === name)?.value;
  return {
    'Service clusterIP': findIn(docs, 'Service', 'capybara-egress').spec.clusterIP,
    'Deployment EGRESS_TRANSPARENT_ANSWER': env(deployment.spec.template.spec.containers[0], 'EGRESS_TRANSPARENT_ANSWER'),
    'Pod nameserver': pod.spec.dnsConfig.nameservers,
    'Pod CAPYBARA_EGRESS_ADDRESS': env(pod.spec.containers[0], 'CAPYBARA_EGRESS_ADDRESS'),
  };
}

async function validates(t: Test, docs: readonly Manifest[], what: string): Promise<void> {
  for (const doc of docs) {
    const { errors, unknown } = await schemaProblems(doc);
    t.same([errors, unknown], [[], []], `${what}: ${objectKey(doc)} validates, with no unknown fields`);
  }
}

t.test('the base renders the plain files, object for object', async (t) => {
  if (missing !== undefined) return platformCannot(t, missing);
  const rendered = await kustomize(BASE_DIR);
  const plain = plainManifests().map((d) => d.doc);
  t.same(rendered.map(objectKey).sort(), plain.map(objectKey).sort(), 'the same objects');
  for (const doc of plain) {
    const twin = rendered.find((r) => objectKey(r) === objectKey(doc));
    t.ok(isDeepStrictEqual(twin, doc), `${objectKey(doc)} is the same as in the files`);
  }
  t.same(addressCopies(rendered), {
    'Service clusterIP': OLD_ADDRESS, 'Deployment EGRESS_TRANSPARENT_ANSWER': OLD_ADDRESS, 'Pod nameserver': [OLD_ADDRESS], 'Pod CAPYBARA_EGRESS_ADDRESS': OLD_ADDRESS,
  }, 'one address in every place');
  await validates(t, rendered, 'base');
});

t.test('the overlay sets the address once, and every copy follows', async (t) => {
  if (missing !== undefined) return platformCannot(t, missing);
  const rendered = await kustomize(OVERLAY_DIR);
  const address = findIn(rendered, 'Service', 'capybara-egress').spec.clusterIP as string;
  t.not(address, OLD_ADDRESS, `the overlay's address is ${address}`);
  t.same(addressCopies(rendered), {
    'Service clusterIP': address, 'Deployment EGRESS_TRANSPARENT_ANSWER': address, 'Pod nameserver': [address], 'Pod CAPYBARA_EGRESS_ADDRESS': address,
  }, 'the new address in every place that names it');
  t.notOk(JSON.stringify(rendered).includes(OLD_ADDRESS), `${OLD_ADDRESS} is nowhere in the render`);
  t.equal(findIn(rendered, 'Deployment', 'capybara-egress').spec.replicas, 3, 'and its replica count');

  // Apart from those, the overlay's objects are the base's.
  const plain = plainManifests().map((d) => d.doc);
  t.same(rendered.map(objectKey).sort(), plain.map(objectKey).sort(), 'the same objects as the base');
  const undo = (doc: Manifest): Manifest => JSON.parse(JSON.stringify(doc).split(address).join(OLD_ADDRESS)) as Manifest;
  for (const doc of rendered) {
    const base = plain.find((p) => objectKey(p) === objectKey(doc));
    const expected = doc.kind === 'Deployment' ? { ...base, spec: { ...base?.spec, replicas: 3 } } : base;
    t.ok(isDeepStrictEqual(undo(doc), expected), `${objectKey(doc)}: only the address${doc.kind === 'Deployment' ? ' and the replicas' : ''} differ`);
  }
  await validates(t, rendered, 'overlay');
});
