/**
 * Which listeners transparent mode runs (proxy/transparent/transparent-ports.ts): DNS on 53, HTTP on 80, TLS
 * on every other connect port, each on the port the map gives it; a map that names a port not
 * served, or two ports on one, is refused.
 */
import t from 'tap';
import { planTransparentPorts } from '../../proxy/transparent/transparent-ports.js';

t.test('the plan from the connect ports and the map', async (t) => {
  const rows = [
    { name: 'the defaults', connect: [443, 80], map: {}, ports: ['dns:53=53', 'http:80=80', 'tls:443=443'] },
    { name: 'every connect port but 80 is TLS', connect: [443, 80, 8443, 8080], map: {}, ports: ['dns:53=53', 'http:80=80', 'tls:443=443', 'tls:8080=8080', 'tls:8443=8443'] },
    { name: 'no 80: no HTTP listener', connect: [443], map: {}, ports: ['dns:53=53', 'tls:443=443'] },
    { name: 'a Kubernetes Service remapping', connect: [443, 80], map: { 53: 5353, 80: 8080, 443: 8443 }, ports: ['dns:53=5353', 'http:80=8080', 'tls:443=8443'] },
    { name: 'a connect port of 53 is DNS, once', connect: [53, 443], map: {}, ports: ['dns:53=53', 'tls:443=443'] },
  ];
  for (const row of rows) {
    const plan = planTransparentPorts(row.connect, new Map(Object.entries(row.map).map(([k, v]) => [Number(k), v])));
    t.same(plan.ok ? plan.ports.map((p) => `${p.kind}:${p.dialled}=${p.listen}`) : plan.problem, row.ports, row.name);
  }
});

t.test('a map that cannot hold is refused', async (t) => {
  const rows = [
    { name: 'a port that is not served', connect: [443, 80], map: [[22, 2222]], problem: /maps port 22, which is neither 53 \(DNS\) nor a connect port \(80,443\)/ },
    { name: 'two ports on one', connect: [443, 80], map: [[443, 80]], problem: /ports 80 and 443 would both listen on 80/ },
    { name: 'a mapped port onto an unmapped one', connect: [443, 8443], map: [[443, 8443]], problem: /ports 443 and 8443 would both listen on 8443/ },
  ];
  for (const row of rows) {
    const plan = planTransparentPorts(row.connect, new Map(row.map as [number, number][]));
    t.notOk(plan.ok, row.name);
    if (!plan.ok) t.match(plan.problem, row.problem, row.name);
  }
});
