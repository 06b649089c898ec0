/**
 * Every default address range of the repository, read from the file that sets it, is clear of
 * every other: the controller's address pool, the egress compose file's workload subnet, the
 * sidecar script's subnets, Docker's own default pools, the Kubernetes service range the
 * manifests assume, and the subnets the tests take. A deployment on defaults never fails with
 * "Pool overlaps", nor puts two networks in one range. And no private range can appear in the
 * shipped files without being one of these (or inside one), so a new default joins the check.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ipaddr from 'ipaddr.js';
import t from 'tap';
import { DEFAULT_ADDRESS_POOL } from '../../controller/spec/address-pool.js';
import { TEST_SUBNETS } from './upstream.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const read = (file: string): string => readFileSync(join(root, file), 'utf8');

function one(text: string, pattern: RegExp, what: string): string {
  const found = pattern.exec(text)?.[1];
  if (found === undefined) throw new Error(`${what}: ${pattern} found nothing`);
  return found;
}

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

interface Range {
  readonly what: string;
  readonly cidr: string;
}

const plugin = JSON.parse(read('.capybara-plugin/plugin.json')) as unknown;
/** The addressPool default in the plugin manifest (its JSON schema), wherever it sits. */
function manifestDefault(node: unknown): string | undefined {
  if (typeof node !== 'object' || node === null) return undefined;
  const entry = (node as Record<string, unknown>).addressPool;
  if (typeof entry === 'object' && entry !== null && typeof (entry as Record<string, unknown>).default === 'string') return (entry as Record<string, string>).default;
  for (const value of Object.values(node)) {
    const found = manifestDefault(value);
    if (found !== undefined) return found;
  }
  return undefined;
}

const egressCompose = read('deploy/egress/compose.yaml');
const DEFAULTS: Range[] = [
  { what: 'the controller\'s address pool (controller/spec/address-pool.ts)', cidr: DEFAULT_ADDRESS_POOL },
  { what: 'the egress compose file\'s workload subnet (deploy/egress/compose.yaml)', cidr: one(egressCompose, /\$\{EGRESS_SUBNET:-([0-9./]+)\}/, 'compose subnet') },
  { what: 'the sidecar script\'s subnets (deploy/egress/sidecar.sh)', cidr: one(read('deploy/egress/sidecar.sh'), /^SUBNETS=([0-9./]+)$/m, 'SUBNETS') },
  // Docker 20.10's default-address-pools (libnetwork ipamutils): 172.17-31 in /16s, 192.168 in /20s.
  ...Array.from({ length: 15 }, (_, i) => ({ what: 'Docker\'s default address pools', cidr: `172.${17 + i}.0.0/16` })),
  { what: 'Docker\'s default address pools', cidr: '192.168.0.0/16' },
  { what: 'the Kubernetes service range the manifests assume (kubeadm\'s default)', cidr: one(read('deploy/kubernetes/egress-proxy.yaml'), /([0-9./]+) is kubeadm's default/, 'service range') },
  { what: 'the tests\' own subnets (test/deploy/upstream.ts)', cidr: TEST_SUBNETS },
];

const parse = (cidr: string): Cidr => ipaddr.parseCIDR(cidr) as Cidr;
const overlaps = (a: Cidr, b: Cidr): boolean =>
  a[0].kind() === b[0].kind() && (a[1] <= b[1] ? (b[0] as ipaddr.IPv4).match(a) : (a[0] as ipaddr.IPv4).match(b));

t.test('the manifest and the code agree on the address pool', async (t) => {
  t.equal(manifestDefault(plugin), DEFAULT_ADDRESS_POOL);
});

t.test('the egress compose file\'s gateway and proxy address lie in its subnet', async (t) => {
  const subnet = parse(DEFAULTS[1]!.cidr);
  for (const name of ['EGRESS_GATEWAY', 'EGRESS_ADDRESS']) {
    const address = one(egressCompose, new RegExp(`\\$\\{${name}:-([0-9.]+)\\}`), name);
    t.ok(ipaddr.parse(address).match(subnet), `${name} ${address} is in ${DEFAULTS[1]!.cidr}`);
  }
});

t.test('no two default ranges overlap', async (t) => {
  for (const [i, a] of DEFAULTS.entries()) {
    for (const b of DEFAULTS.slice(i + 1)) {
      t.notOk(overlaps(parse(a.cidr), parse(b.cidr)), `${a.what} ${a.cidr} and ${b.what} ${b.cidr}`);
    }
  }
});

t.test('the overlap check catches what it claims to', async (t) => {
  t.ok(overlaps(parse('10.213.0.0/16'), parse('10.213.53.0/24')), 'a subnet inside a pool');
  t.ok(overlaps(parse('10.213.53.0/24'), parse('10.213.0.0/16')), 'either way round');
  t.ok(overlaps(parse('10.200.0.0/13'), parse('10.205.1.0/24')));
  t.notOk(overlaps(parse('10.213.0.0/16'), parse('10.214.0.0/16')), 'neighbours');
});

t.test('every private range in the shipped files is a default range or lies inside one', async (t) => {
  // Whole private blocks (10/8, 172.16/12, 192.168/16 and wider) are definitions, not defaults;
  // the policy's address classes, the benchmarks and the tests are not shipped deploy settings.
  const files = execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' })
    .split('\n')
    .filter((f) => f !== '' && !/^(test|policy|bench)\//.test(f));
  const ranges = DEFAULTS.map((d) => parse(d.cidr));
  const literal = /\b((?:10|172|192)\.\d{1,3}\.\d{1,3}\.\d{1,3})\/(\d{1,2})\b/g;
  let seen = 0;
  for (const file of files) {
    let text: string;
    try {
      text = read(file);
    } catch {
      continue; // removed from the tree but not yet from the index
    }
    for (const m of text.matchAll(literal)) {
      if (!ipaddr.isValidCIDR(m[0])) continue;
      const cidr = parse(m[0]);
      if (cidr[0].range() !== 'private' || cidr[1] <= 12) continue;
      seen++;
      t.ok(ranges.some((r) => r[1] <= cidr[1] && overlaps(r, cidr)), `${file}: ${m[0]} is a default range or inside one`);
    }
  }
  t.ok(seen > 5, `${seen} private ranges found in the shipped files`);
});
