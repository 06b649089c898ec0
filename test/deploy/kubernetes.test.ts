/**
 * The Kubernetes manifests under deploy/kubernetes/, checked offline: every document validates
 * against the Kubernetes OpenAPI schemas (kubernetes-models, generated from them), with unknown
 * fields refused as a strict API server would; the policy in the ConfigMap loads with the
 * proxy's own policy code; the proxy's environment parses with its own configuration code; and the
 * security properties docs/kubernetes.md claims hold, transparent mode's wiring included (the
 * Service address is the workloads' DNS server and the proxy's answer; each port a client dials
 * reaches the port the proxy listens on and decides by; the NetworkPolicies let exactly those through).
 */
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { buildPolicy, parsePolicyText } from '../../policy/index.js';
import { parseConfig } from '../../proxy/config.js';
import { planTransparentPorts } from '../../proxy/transparent/transparent-ports.js';
import { unknownFields, type SchemaError, type ValidateManifest } from './k8s-strict.js';

const dir = fileURLToPath(new URL('../../deploy/kubernetes', import.meta.url));

type Manifest = Record<string, any>;

/** The kubernetes-models module of each apiVersion used here. */
const MODEL_MODULES: Record<string, string> = {
  v1: 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
};

async function validatorFor(doc: Manifest): Promise<ValidateManifest> {
  const modulePath = MODEL_MODULES[doc.apiVersion];
  if (modulePath === undefined) throw new Error(`no model module for apiVersion ${doc.apiVersion}`);
  const Model = (await import(modulePath))[doc.kind] as (new (data: unknown) => { validate(): void }) | undefined;
  if (Model === undefined) throw new Error(`kubernetes-models has no ${doc.apiVersion} ${doc.kind}`);
  return (data) => {
    try {
      new Model(data).validate();
      return [];
    } catch (err) {
      return (err as { errors?: SchemaError[] }).errors ?? [{ instancePath: '', message: (err as Error).message }];
    }
  };
}

const docs: Array<{ file: string; doc: Manifest }> = readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort().flatMap((file) =>
  parseAllDocuments(readFileSync(join(dir, file), 'utf8')).map((d) => {
    if (d.errors.length > 0) throw new Error(`${file}: ${d.errors[0]?.message}`);
    return { file, doc: d.toJS() as Manifest };
  }));
const find = (kind: string, name: string): Manifest => {
  const hit = docs.find((d) => d.doc.kind === kind && d.doc.metadata?.name === name);
  if (hit === undefined) throw new Error(`no ${kind} ${name} in deploy/kubernetes`);
  return hit.doc;
};

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
  t.ok(docs.length >= 7, `${docs.length} documents`);
  for (const { file, doc } of docs) {
    const validate = await validatorFor(doc);
    const where = `${file}: ${doc.kind} ${doc.metadata?.name}`;
    t.same(validate(doc), [], `${where} validates`);
    t.same(unknownFields(doc, validate), [], `${where} has no unknown fields`);
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
  t.equal(find('Namespace', 'capybara-workloads').metadata.labels['pod-security.kubernetes.io/enforce'], 'restricted');
});

t.test('workloads have no way out but the proxy', async (t) => {
  const policy = find('NetworkPolicy', 'workloads-only-through-egress').spec;
  t.same(policy.podSelector, { matchExpressions: [{ key: 'app.kubernetes.io/name', operator: 'NotIn', values: ['capybara-egress'] }] }, 'every pod but the proxy');
  t.same(policy.policyTypes, ['Ingress', 'Egress']);
  t.same(policy.ingress, [], 'nothing in');
  t.same(policy.egress.length, 1, 'one rule');
  t.same(policy.egress[0].to, [{ podSelector: { matchLabels: { 'app.kubernetes.io/name': 'capybara-egress' } } }], 'out only to the proxy, DNS included');
  const proxyLabels = find('Deployment', 'capybara-egress').spec.template.metadata.labels;
  t.same(proxyLabels, { 'app.kubernetes.io/name': 'capybara-egress' }, 'the label both policies select on');
  const workload = find('Pod', 'example-workload').spec.containers[0];
  t.match(workload.env.find((e: Manifest) => e.name === 'HTTPS_PROXY')?.value, /^http:\/\/\$\(CAPYBARA_EGRESS_SERVICE_HOST\):3128$/, 'the proxy by its service address: no DNS needed for it');
  t.equal(find('Service', 'capybara-egress').metadata.name.toUpperCase().replace(/-/g, '_') + '_SERVICE_HOST', 'CAPYBARA_EGRESS_SERVICE_HOST', 'the variable Kubernetes derives from the service name');

  const proxy = find('NetworkPolicy', 'capybara-egress').spec;
  const blocks = proxy.egress.flatMap((r: Manifest) => r.to).filter((p: Manifest) => p.ipBlock !== undefined).map((p: Manifest) => p.ipBlock);
  const v4 = blocks.find((b: Manifest) => b.cidr === '0.0.0.0/0');
  for (const cidr of ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16', '127.0.0.0/8', '100.64.0.0/10']) t.ok(v4.except.includes(cidr), `the proxy cannot reach ${cidr}`);
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
