/**
 * The egress proxy's NetworkPolicy refuses, as a second fence, the ranges the proxy's own
 * address checks refuse (policy/address-ranges.ts). The `except` lists are checked against that
 * table, so that a row added there and forgotten here fails: every denied range lies inside an
 * excepted one; so does every IPv6 prefix that carries an IPv4 address (a NetworkPolicy cannot
 * look inside an address, so those are refused whole); and every excepted range is a row of the
 * table, so the fence refuses nothing the proxy would not name. And each is one the API server
 * takes: it refuses the whole NetworkPolicy for one it does not.
 */
import t from 'tap';
import ipaddr from 'ipaddr.js';
import { classifyAddress } from '../../policy/index.js';
import { IPV4_DENIED, IPV6_DENIED, IPV6_EMBEDDINGS } from '../../policy/address-ranges.js';
import { findIn, plainManifests, type Manifest } from './kubernetes-manifests.js';

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

const proxyPolicy = findIn(plainManifests().map((d) => d.doc), 'NetworkPolicy', 'capybara-egress').spec;
const blocks = proxyPolicy.egress.flatMap((r: Manifest) => r.to).filter((p: Manifest) => p.ipBlock !== undefined).map((p: Manifest) => p.ipBlock as { cidr: string; except: string[] });
const v4Block = blocks.find((b: Manifest) => b.cidr === '0.0.0.0/0');
const v6Block = blocks.find((b: Manifest) => b.cidr === '::/0');

/** Whether `inner` lies wholly inside `outer`. */
function within(inner: Cidr, outer: Cidr): boolean {
  return inner[0].kind() === outer[0].kind() && inner[1] >= outer[1] && inner[0].match(outer as never);
}

const canonical = (cidr: string): string => {
  const [addr, bits] = ipaddr.parseCIDR(cidr);
  return `${addr.toString()}/${bits}`;
};

/** Whether `address` falls in one of the block's excepted ranges. */
function excepted(block: { except: string[] }, address: string): boolean {
  const parsed = ipaddr.parse(address);
  return block.except.some((e) => {
    const range = ipaddr.parseCIDR(e);
    return range[0].kind() === parsed.kind() && parsed.match(range as never);
  });
}

const families = [
  { name: 'IPv4', block: v4Block, rows: IPV4_DENIED.map((r) => r.cidr) },
  { name: 'IPv6', block: v6Block, rows: [...IPV6_DENIED, ...IPV6_EMBEDDINGS].map((r) => r.cidr) },
];

t.test('the proxy may send to every address of both families but the excepted ones', async (t) => {
  t.same(blocks.map((b: Manifest) => b.cidr), ['0.0.0.0/0', '::/0']);
});

for (const { name, block, rows } of families) {
  t.test(`${name}: every range the proxy refuses is excepted`, async (t) => {
    const except = (block.except as string[]).map((e) => ipaddr.parseCIDR(e));
    for (const row of rows) {
      const range = ipaddr.parseCIDR(row);
      t.ok(except.some((e) => within(range, e)), `${row} lies in an excepted range`);
    }
  });

  t.test(`${name}: every excepted range is one the proxy refuses`, async (t) => {
    const known = new Set(rows.map(canonical));
    for (const e of block.except as string[]) {
      t.ok(known.has(canonical(e)), `${e} is a row of policy/address-ranges.ts`);
      t.equal(e, canonical(e), `${e} is written canonically`);
    }
    t.equal(new Set(block.except).size, block.except.length, 'no range twice');
  });
}

t.test('the API server takes every excepted range', async (t) => {
  // Its check (ValidateIPBlock: the except's network address inside cidr, a longer prefix) uses
  // Go's net.IPNet.Contains, which reads an IPv4-mapped address as IPv4: an except such as
  // ::ffff:0:0/96 under ::/0 is refused, and with it the whole NetworkPolicy.
  const mapped = ipaddr.parseCIDR('::ffff:0:0/96');
  const goReadsAsIPv4 = (addr: ipaddr.IPv4 | ipaddr.IPv6): boolean => addr.kind() === 'ipv6' && addr.match(mapped as never);
  t.ok(goReadsAsIPv4(ipaddr.parseCIDR('::ffff:0:0/96')[0]) && !goReadsAsIPv4(ipaddr.parseCIDR('::/8')[0]), 'the check itself');
  for (const block of [v4Block, v6Block]) {
    const outer = ipaddr.parseCIDR(block.cidr);
    for (const e of block.except as string[]) {
      const inner = ipaddr.parseCIDR(e);
      const network = (inner[0].kind() === 'ipv4' ? ipaddr.IPv4.networkAddressFromCIDR(e) : ipaddr.IPv6.networkAddressFromCIDR(e));
      t.ok(inner[1] > outer[1] && within(inner, outer) && !goReadsAsIPv4(network), `${e} is a strict subset of ${block.cidr} to the API server`);
    }
  }
});

t.test('addresses, as the proxy judges them and as the fence does', async (t) => {
  const rows = [
    { name: 'IPv6 loopback', address: '::1' },
    { name: 'IPv4-mapped private (in ::/8)', address: '::ffff:10.0.0.1' },
    { name: 'NAT64 of a private address', address: '64:ff9b::a00:1' },
    { name: 'local-use NAT64', address: '64:ff9b:1::8.8.8.8' },
    { name: '6to4 of a private address', address: '2002:a00:1::1' },
    { name: 'Teredo with a private client', address: '2001:0:4136:e378:8000:63bf:f5ff:fffe' },
    { name: 'ULA', address: 'fd00::1' },
    { name: 'AWS IMDS over IPv6', address: 'fd00:ec2::254' },
    { name: 'documentation IPv6', address: '2001:db8::1' },
    { name: 'cloud metadata', address: '169.254.169.254' },
    { name: 'Azure WireServer', address: '168.63.129.16' },
    { name: 'Alibaba metadata', address: '100.100.100.200' },
    { name: 'limited broadcast', address: '255.255.255.255' },
    { name: 'RFC 1918', address: '192.168.1.1' },
  ];
  for (const row of rows) {
    t.equal(classifyAddress(row.address).public, false, `${row.name}: the proxy refuses ${row.address}`);
    const block = row.address.includes(':') ? v6Block : v4Block;
    t.ok(excepted(block, row.address), `${row.name}: the fence refuses ${row.address}`);
  }
  for (const address of ['1.1.1.1', '151.101.0.223', '2606:4700:4700::1111', '2a04:4e42::223']) {
    t.equal(classifyAddress(address).public, true, `the proxy dials ${address}`);
    t.notOk(excepted(address.includes(':') ? v6Block : v4Block, address), `the fence lets ${address} through`);
  }
});
