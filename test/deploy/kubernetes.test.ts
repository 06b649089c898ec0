/**
 * The Kubernetes manifests under deploy/kubernetes/, checked offline: every document validates
 * against the Kubernetes OpenAPI schemas (kubernetes-models, generated from them), with unknown
 * fields refused as a strict API server would; the policy in the ConfigMap loads with the
 * proxy's own policy code; the proxy's environment parses with its own configuration code; and the
 * security properties docs/kubernetes.md claims hold, transparent mode's wiring included (the
 * Service address is the workloads' DNS server and the proxy's answer; each port a client dials
 * reaches the port the proxy listens on and decides by; the NetworkPolicies let exactly those through),
 * no workload pod exempt from its policy whatever its labels, the replicas' disruption budget and
 * anti-affinity, and a metrics port only a scraper's namespace reaches. The kustomize renders are
 * checked in kubernetes-kustomize.test.ts, the except lists in kubernetes-ranges.test.ts.
 */
import t from 'tap';
import { readdirSync } from 'node:fs';
import { buildPolicy, parsePolicyText } from '../../policy/index.js';
import { EGRESS_HEALTH_PATH, EGRESS_METRICS_PATH } from '../../common/index.js';
import { parseConfig } from '../../proxy/config.js';
import { planTransparentPorts } from '../../proxy/transparent/transparent-ports.js';
import { unknownFields } from './k8s-strict.js';
import { baseFiles, BASE_DIR, findIn, plainManifests, schemaProblems, validatorFor, type Manifest } from './kubernetes-manifests.js';

const docs = plainManifests();
const find = (kind: string, name: string): Manifest => findIn(docs.map((d) => d.doc), kind, name);

t.test('the strict check itself', async (t) => {
  const validate = await validatorFor({ apiVersion: 'apps/v1', kind: 'Deployment' });
  const base = {
    apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x', labels: { 'app.kubernetes.io/name': 'x' } },
    spec: { selector: { matchLabels: { a: 'b' } }, template: { metadata: { labels: { a: 'b' } }, spec: { containers: [{ name: 'c', image: 'i', securityContext: { readOnlyRootFilesystem: true } }] } } },
  };
  const rows = [
    { name: 'a valid manifest', doc: base, unknown: [] },
    { name: 'a misspelt field', doc: { ...base, spec: { ...base.spec, replicaz: 2 } }, unknown: ['/spec/replicaz'] },
    { name: 'a misspelt nested field', doc: structuredCloneWith(base, (d) => { d.spec.template.spec.containers[0].securityContex = {}; }), unknown: ['/spec/template/spec/containers/0/securityContex'] },
  ];
  for (const row of rows) t.same(unknownFields(row.doc, validate), row.unknown, row.name);
  t.same(validate({ ...base, spec: { ...base.spec, replicas: 'two' } }).map((e) => e.instancePath), ['/spec/replicas'], 'a wrong type is a schema error');
});

t.test('every manifest validates against the Kubernetes schemas, strictly', async (t) => {
  const yamlFiles = readdirSync(BASE_DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml').sort();
  t.same([...baseFiles()].sort(), yamlFiles, 'the base\'s kustomization.yaml lists every manifest file');
  t.ok(docs.length >= 9, `${docs.length} documents`);
  for (const { file, doc } of docs) {
    const where = `${file}: ${doc.kind} ${doc.metadata?.name}`;
    const { errors, unknown } = await schemaProblems(doc);
    t.same(errors, [], `${where} validates`);
    t.same(unknown, [], `${where} has no unknown fields`);
  }
});

t.test('the ConfigMap holds a policy the proxy loads', async (t) => {
  const text = find('ConfigMap', 'capybara-egress-policy').data['policy.yaml'] as string;
  const built = buildPolicy(parsePolicyText(text, 'ConfigMap capybara-egress-policy'));
  t.ok(built.ok, JSON.stringify(built));
  const deployment = find('Deployment', 'capybara-egress');
  const container = deployment.spec.template.spec.containers[0];
  const policyEnv = container.env.find((e: Manifest) => e.name === 'EGRESS_POLICY_FILE')?.value as string;
  const mount = container.volumeMounts.find((m: Manifest) => policyEnv.startsWith(`${m.mountPath}/`));
  t.equal(mount?.readOnly, true, 'the policy is mounted read-only where EGRESS_POLICY_FILE points');
  const volume = deployment.spec.template.spec.volumes.find((v: Manifest) => v.name === mount?.name);
  t.equal(volume?.configMap?.name, 'capybara-egress-policy');
});

t.test('pods are hardened', async (t) => {
  for (const { doc } of docs.filter((d) => d.doc.kind === 'Deployment' || d.doc.kind === 'Pod')) {
    const pod = doc.kind === 'Pod' ? doc.spec : doc.spec.template.spec;
    const name = `${doc.kind} ${doc.metadata.name}`;
    t.equal(pod.automountServiceAccountToken, false, `${name}: no API token`);
    t.same([pod.securityContext.runAsNonRoot, pod.securityContext.seccompProfile?.type], [true, 'RuntimeDefault'], `${name}: non-root, seccomp`);
    for (const c of pod.containers) {
      t.same([c.securityContext.allowPrivilegeEscalation, c.securityContext.readOnlyRootFilesystem, c.securityContext.capabilities?.drop],
        [false, true, ['ALL']], `${name}/${c.name}: no escalation, read-only root, no capabilities`);
    }
  }
  for (const name of ['capybara-egress', 'capybara-workloads']) t.equal(find('Namespace', name).metadata.labels['pod-security.kubernetes.io/enforce'], 'restricted', `${name}: Pod Security restricted`);
});

t.test('no pod can take a node\'s CPU, memory or disk: every container has both limits, every emptyDir a size', async (t) => {
  for (const { doc } of docs.filter((d) => d.doc.kind === 'Deployment' || d.doc.kind === 'Pod')) {
    const pod = doc.kind === 'Pod' ? doc.spec : doc.spec.template.spec;
    const name = `${doc.kind} ${doc.metadata.name}`;
    for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
      t.ok(c.resources?.limits?.cpu, `${name}/${c.name}: a CPU limit (a tenant driving it cannot take every core of the node)`);
      t.ok(c.resources?.limits?.memory, `${name}/${c.name}: a memory limit`);
    }
    // An emptyDir without sizeLimit is bounded only by the node's disk (or, in memory, the
    // container's memory limit): one workload filling its workspace fills the node's disk and
    // gets every pod there evicted. With a sizeLimit the kubelet evicts that pod alone.
    for (const v of (pod.volumes ?? []).filter((v: Manifest) => v.emptyDir !== undefined)) {
      t.ok(v.emptyDir.sizeLimit, `${name}: emptyDir ${v.name} has a sizeLimit`);
    }
  }
});

t.test('workloads have no way out but the proxy, and no pod of theirs is exempt', async (t) => {
  const deployment = find('Deployment', 'capybara-egress');
  const proxyNamespace = deployment.metadata.namespace as string;
  const workloadNamespace = find('Pod', 'example-workload').metadata.namespace as string;
  t.not(proxyNamespace, workloadNamespace, 'the proxy runs in a namespace of its own');
  const inProxyNamespace = docs.filter((d) => d.doc.metadata?.namespace === proxyNamespace).map((d) => `${d.doc.kind}/${d.doc.metadata.name}`).sort();
  t.same(inProxyNamespace, ['ConfigMap/capybara-egress-policy', 'Deployment/capybara-egress', 'NetworkPolicy/capybara-egress', 'PodDisruptionBudget/capybara-egress', 'Service/capybara-egress'], 'and nothing else runs there');

  const policy = find('NetworkPolicy', 'workloads-only-through-egress');
  t.equal(policy.metadata.namespace, workloadNamespace);
  t.same(policy.spec.podSelector, {}, 'every pod of the workloads\' namespace, whatever labels it gives itself');
  t.same(policy.spec.policyTypes, ['Ingress', 'Egress']);
  t.same(policy.spec.ingress, [], 'nothing in');
  t.same(policy.spec.egress.length, 1, 'one rule');
  const proxyLabels = deployment.spec.template.metadata.labels;
  t.same(policy.spec.egress[0].to, [{
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': proxyNamespace } },
    podSelector: { matchLabels: proxyLabels },
  }], 'out only to the proxy\'s pods, DNS included: its namespace AND its label, in one peer');
  t.same(proxyLabels, { 'app.kubernetes.io/name': 'capybara-egress' }, 'the label the policies select on');
  t.same(deployment.spec.selector.matchLabels, proxyLabels, 'the Deployment\'s own selector');

  const proxy = find('NetworkPolicy', 'capybara-egress');
  t.equal(proxy.metadata.namespace, proxyNamespace);
  t.same(proxy.spec.podSelector, { matchLabels: proxyLabels }, 'the proxy\'s policy selects the proxy');
  t.same(proxy.spec.ingress[0].from, [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloadNamespace } } }], 'the proxy serves the workloads\' namespace');

  const workload = find('Pod', 'example-workload').spec.containers[0];
  const env = (name: string): string | undefined => workload.env.find((e: Manifest) => e.name === name)?.value;
  t.match(env('HTTPS_PROXY'), /^http:\/\/\$\(CAPYBARA_EGRESS_ADDRESS\):3128$/, 'the proxy by its service address: no DNS needed for it');
  t.equal(workload.env.findIndex((e: Manifest) => e.name === 'CAPYBARA_EGRESS_ADDRESS'), 0, 'defined before the variables that expand it');
  t.equal(env('CAPYBARA_EGRESS_ADDRESS'), find('Service', 'capybara-egress').spec.clusterIP, 'the Service\'s address');
});

t.test('two replicas on different nodes where it can, one always left by a drain', async (t) => {
  const deployment = find('Deployment', 'capybara-egress');
  const labels = deployment.spec.template.metadata.labels;
  t.equal(deployment.spec.replicas, 2);
  const pdb = find('PodDisruptionBudget', 'capybara-egress');
  t.equal(pdb.metadata.namespace, deployment.metadata.namespace);
  t.same([pdb.spec.minAvailable, pdb.spec.maxUnavailable], [1, undefined], 'one replica always available');
  t.same(pdb.spec.selector, { matchLabels: labels }, 'the budget covers the proxy\'s pods');
  const affinity = deployment.spec.template.spec.affinity;
  t.same(Object.keys(affinity), ['podAntiAffinity']);
  t.equal(affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution, undefined, 'not required: a one-node cluster still schedules both');
  t.same(affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution, [{
    weight: 100,
    podAffinityTerm: { topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: labels } },
  }], 'apart from each other, by node');
});

t.test('metrics: a named port, the scrape annotations, reachable only from a scraper\'s namespace', async (t) => {
  const deployment = find('Deployment', 'capybara-egress');
  const container = deployment.spec.template.spec.containers[0];
  const env = Object.fromEntries(container.env.map((e: Manifest) => [e.name, e.value as string]));
  const config = parseConfig([], env);
  const port = config?.metricsListen?.port;
  t.equal(config?.metricsListen?.host, '0.0.0.0', 'the proxy serves metrics on the pod\'s address');
  t.same(container.ports.filter((p: Manifest) => p.containerPort === port), [{ name: 'metrics', containerPort: port, protocol: 'TCP' }], 'a named container port');
  t.same(deployment.spec.template.metadata.annotations, {
    'prometheus.io/scrape': 'true', 'prometheus.io/port': String(port), 'prometheus.io/path': EGRESS_METRICS_PATH,
  }, 'the scrape annotations name that port and the path the proxy serves');
  const service = find('Service', 'capybara-egress').spec;
  t.same(service.ports.find((p: Manifest) => p.name === 'metrics'), { name: 'metrics', port, targetPort: 'metrics', protocol: 'TCP' }, 'a named Service port for a ServiceMonitor');

  const proxy = find('NetworkPolicy', 'capybara-egress').spec;
  const byPort = proxy.ingress.filter((r: Manifest) => r.ports.some((p: Manifest) => p.port === port));
  t.same(byPort, [{ from: [{ namespaceSelector: { matchLabels: { 'capybara.dev/egress-metrics': 'scrape' } } }], ports: [{ protocol: 'TCP', port }] }],
    'only a namespace labelled capybara.dev/egress-metrics=scrape reaches it, and only it');
  const workloads = find('NetworkPolicy', 'workloads-only-through-egress').spec;
  t.notOk(workloads.egress.some((r: Manifest) => r.ports.some((p: Manifest) => p.port === port)), 'workloads cannot reach it');
});

t.test('liveness is asked on the metrics listener, readiness on the proxy port', async (t) => {
  const container = find('Deployment', 'capybara-egress').spec.template.spec.containers[0];
  // Clients filling the proxy port (every connection and health-check slot) make the pod unready;
  // a liveness probe there would get it restarted, every tunnel with it.
  t.same(container.livenessProbe.httpGet, { path: EGRESS_HEALTH_PATH, port: 'metrics' }, 'liveness: the metrics listener, whose slots no proxy client takes');
  t.same(container.readinessProbe.httpGet, { path: EGRESS_HEALTH_PATH, port: 'proxy' }, 'readiness: the proxy port itself');
});

function structuredCloneWith<T>(value: T, edit: (copy: any) => void): T {
  const copy = structuredClone(value);
  edit(copy);
  return copy;
}

t.test('transparent mode: the Service is the workloads\' DNS and the proxy\'s answer, every port wired through', async (t) => {
  const deployment = find('Deployment', 'capybara-egress');
  const container = deployment.spec.template.spec.containers[0];
  const env = Object.fromEntries(container.env.map((e: Manifest) => [e.name, e.value as string]));
  const config = parseConfig([], env);
  t.ok(config?.transparent, 'the proxy\'s environment turns transparent mode on, and parses');
  const service = find('Service', 'capybara-egress').spec;
  t.equal(config?.transparent?.answer, service.clusterIP, 'allowed names resolve to the Service');
  const pod = find('Pod', 'example-workload').spec;
  t.same([pod.dnsPolicy, pod.dnsConfig.nameservers, pod.dnsConfig.searches], ['None', [service.clusterIP], []], 'the workload asks only the Service, no search domains');

  const text = find('ConfigMap', 'capybara-egress-policy').data['policy.yaml'] as string;
  const built = buildPolicy(parsePolicyText(text, 'ConfigMap'));
  if (!built.ok) throw new Error('the policy does not load');
  const plan = planTransparentPorts(built.policy.connectPorts, config?.transparent?.portMap ?? new Map());
  if (!plan.ok) throw new Error(plan.problem);
  t.same(plan.ports.map((p) => `${p.kind}:${p.dialled}=${p.listen}`), ['dns:53=5353', 'http:80=8080', 'tls:443=8443'], 'DNS, HTTP and TLS, on ports a non-root process binds');

  // Every port a client dials reaches, through the Service, the port the proxy listens on for it.
  const containerPort = (name: string, protocol: string): number | undefined => container.ports.find((p: Manifest) => p.name === name && p.protocol === protocol)?.containerPort;
  const wanted = plan.ports.flatMap((p) => (p.kind === 'dns' ? [{ ...p, protocol: 'UDP' }, { ...p, protocol: 'TCP' }] : [{ ...p, protocol: 'TCP' }]));
  for (const p of wanted) {
    const servicePort = service.ports.find((s: Manifest) => s.port === p.dialled && s.protocol === p.protocol);
    t.ok(servicePort, `the Service has ${p.protocol} ${p.dialled}`);
    t.equal(containerPort(servicePort?.targetPort, p.protocol), p.listen, `${p.protocol} ${p.dialled} reaches ${p.listen} in the pod`);
  }
  const allowed = [{ protocol: 'TCP', port: 3128 }, ...wanted.map((p) => ({ protocol: p.protocol, port: p.listen }))];
  const key = (p: Manifest): string => `${p.protocol}/${p.port}`;
  t.same(find('NetworkPolicy', 'workloads-only-through-egress').spec.egress[0].ports.map(key).sort(), allowed.map(key).sort(), 'workloads may send exactly to the proxy\'s ports');
  t.same(find('NetworkPolicy', 'capybara-egress').spec.ingress[0].ports.map(key).sort(), allowed.map(key).sort(), 'the proxy takes exactly those');
});
