import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import t, { type Test } from 'tap';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { holds } from '../support/property.js';
import { ADDRESS_CLASSES, classifyAddress, type AddressClassName, type AddressVerdict } from '../../policy/address-class.js';
import { IPV4_DENIED, IPV6_DENIED, IPV6_EMBEDDINGS } from '../../policy/address-ranges.js';

type Expect = AddressClassName | 'public';
/** [name, address, expected class or 'public', optionally the expected range or the expected via] */
type Row = readonly [string, string, Expect, string?];

const VIAS: readonly string[] = ['ipv4-mapped', 'ipv4-compatible', 'ipv4-translated', 'nat64', '6to4', 'teredo'];

function check(tt: Test, [name, address, expect, detail]: Row): void {
  const v = classifyAddress(address);
  if (expect === 'public') {
    tt.equal(v.public, true, `${name}: ${address} is public`);
    return;
  }
  tt.equal(v.public ? 'public' : v.addressClass, expect, `${name}: ${address} is ${expect}`);
  if (detail !== undefined && !v.public) {
    tt.equal(VIAS.includes(detail) ? v.via : v.range, detail, `${name}: ${address} matched ${detail}`);
  }
}

const v4Edges: Row[] = [
  ['unspecified', '0.0.0.0', 'unspecified', '0.0.0.0/32'],
  ['this network first after 0.0.0.0', '0.0.0.1', 'this_network', '0.0.0.0/8'],
  ['this network last', '0.255.255.255', 'this_network'],
  ['after this network', '1.0.0.0', 'public'],
  ['before 10/8', '9.255.255.255', 'public'],
  ['RFC 1918 10/8 first', '10.0.0.0', 'private', '10.0.0.0/8'],
  ['RFC 1918 10/8 last', '10.255.255.255', 'private'],
  ['after 10/8', '11.0.0.0', 'public'],
  ['before CGNAT', '100.63.255.255', 'public'],
  ['CGNAT first', '100.64.0.0', 'cgnat', '100.64.0.0/10'],
  ['CGNAT last', '100.127.255.255', 'cgnat'],
  ['after CGNAT', '100.128.0.0', 'public'],
  ['before loopback', '126.255.255.255', 'public'],
  ['loopback first', '127.0.0.0', 'loopback', '127.0.0.0/8'],
  ['loopback usual', '127.0.0.1', 'loopback'],
  ['loopback last', '127.255.255.255', 'loopback'],
  ['after loopback', '128.0.0.0', 'public'],
  ['Azure WireServer', '168.63.129.16', 'cloud_metadata', '168.63.129.16/32'],
  ['next to Azure WireServer', '168.63.129.15', 'public'],
  ['next to Azure WireServer, above', '168.63.129.17', 'public'],
  ['before link-local', '169.253.255.255', 'public'],
  ['link-local first', '169.254.0.0', 'link_local', '169.254.0.0/16'],
  ['IMDS', '169.254.169.254', 'cloud_metadata', '169.254.169.254/32'],
  ['next to IMDS is still link-local', '169.254.169.253', 'link_local'],
  ['ECS task metadata', '169.254.170.2', 'cloud_metadata'],
  ['EKS Pod Identity', '169.254.170.23', 'cloud_metadata'],
  ['link-local last', '169.254.255.255', 'link_local'],
  ['after link-local', '169.255.0.0', 'public'],
  ['before 172.16/12', '172.15.255.255', 'public'],
  ['RFC 1918 172.16/12 first', '172.16.0.0', 'private', '172.16.0.0/12'],
  ['RFC 1918 172.16/12 last', '172.31.255.255', 'private'],
  ['after 172.16/12', '172.32.0.0', 'public'],
  ['before IETF protocol', '191.255.255.255', 'public'],
  ['IETF protocol first', '192.0.0.0', 'ietf_protocol', '192.0.0.0/24'],
  ['PCP anycast, denied with its /24', '192.0.0.9', 'ietf_protocol'],
  ['TURN anycast, denied with its /24', '192.0.0.10', 'ietf_protocol'],
  ['IETF protocol last', '192.0.0.255', 'ietf_protocol'],
  ['between IETF protocol and TEST-NET-1', '192.0.1.0', 'public'],
  ['TEST-NET-1 first', '192.0.2.0', 'documentation', '192.0.2.0/24'],
  ['TEST-NET-1 last', '192.0.2.255', 'documentation'],
  ['after TEST-NET-1', '192.0.3.0', 'public'],
  ['AS112-v4', '192.31.196.1', 'anycast_service', '192.31.196.0/24'],
  ['AMT', '192.52.193.1', 'anycast_service', '192.52.193.0/24'],
  ['before 6to4 relay', '192.88.98.255', 'public'],
  ['6to4 relay first', '192.88.99.0', '6to4_relay', '192.88.99.0/24'],
  ['6to4 relay last', '192.88.99.255', '6to4_relay'],
  ['after 6to4 relay', '192.88.100.0', 'public'],
  ['before 192.168/16', '192.167.255.255', 'public'],
  ['RFC 1918 192.168/16 first', '192.168.0.0', 'private', '192.168.0.0/16'],
  ['RFC 1918 192.168/16 last', '192.168.255.255', 'private'],
  ['after 192.168/16', '192.169.0.0', 'public'],
  ['AS112 direct delegation', '192.175.48.10', 'anycast_service', '192.175.48.0/24'],
  ['before benchmarking', '198.17.255.255', 'public'],
  ['benchmarking first', '198.18.0.0', 'benchmarking', '198.18.0.0/15'],
  ['benchmarking last', '198.19.255.255', 'benchmarking'],
  ['after benchmarking', '198.20.0.0', 'public'],
  ['before TEST-NET-2', '198.51.99.255', 'public'],
  ['TEST-NET-2 first', '198.51.100.0', 'documentation', '198.51.100.0/24'],
  ['TEST-NET-2 last', '198.51.100.255', 'documentation'],
  ['after TEST-NET-2', '198.51.101.0', 'public'],
  ['before TEST-NET-3', '203.0.112.255', 'public'],
  ['TEST-NET-3 first', '203.0.113.0', 'documentation', '203.0.113.0/24'],
  ['TEST-NET-3 last', '203.0.113.255', 'documentation'],
  ['after TEST-NET-3', '203.0.114.0', 'public'],
  ['before multicast', '223.255.255.255', 'public'],
  ['multicast first', '224.0.0.0', 'multicast', '224.0.0.0/4'],
  ['multicast last', '239.255.255.255', 'multicast'],
  ['reserved class E first', '240.0.0.0', 'reserved', '240.0.0.0/4'],
  ['reserved class E last before broadcast', '255.255.255.254', 'reserved'],
  ['broadcast', '255.255.255.255', 'broadcast', '255.255.255.255/32'],
  ['Alibaba metadata', '100.100.100.200', 'cloud_metadata', '100.100.100.200/32'],
  ['ordinary public', '93.184.215.14', 'public'],
];

const v6Edges: Row[] = [
  ['unspecified', '::', 'unspecified', '::/128'],
  ['loopback', '::1', 'loopback', '::1/128'],
  ['loopback, uncompressed', '0:0:0:0:0:0:0:1', 'loopback'],
  ['link-local first', 'fe80::', 'link_local', 'fe80::/10'],
  ['link-local last', 'febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'link_local'],
  ['site-local first', 'fec0::', 'site_local', 'fec0::/10'],
  ['site-local last', 'feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'site_local'],
  ['ULA first', 'fc00::', 'unique_local', 'fc00::/7'],
  ['ULA last', 'fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'unique_local'],
  ['AWS IMDS IPv6', 'fd00:ec2::254', 'cloud_metadata', 'fd00:ec2::254/128'],
  ['EKS Pod Identity IPv6', 'fd00:ec2::23', 'cloud_metadata'],
  ['GCP metadata IPv6', 'fd20:ce::254', 'cloud_metadata'],
  ['multicast first', 'ff00::', 'multicast', 'ff00::/8'],
  ['multicast last', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'multicast'],
  ['discard first', '100::', 'discard', '100::/64'],
  ['discard last', '100::ffff:ffff:ffff:ffff', 'discard'],
  ['after discard is reserved', '100:0:0:1::', 'reserved', '100::/8'],
  ['SRv6 first', '5f00::', 'srv6_sid', '5f00::/16'],
  ['SRv6 last', '5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'srv6_sid'],
  ['next to SRv6 is reserved', '5f01::', 'reserved', '4000::/3'],
  ['below global unicast', '1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved', '1000::/4'],
  ['global unicast first', '2000::', 'public'],
  ['global unicast last', '3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'public'],
  ['above global unicast', '4000::', 'reserved', '4000::/3'],
  ['IETF protocol block last', '2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff', 'ietf_protocol', '2001::/23'],
  ['PCP anycast', '2001:1::1', 'ietf_protocol'],
  ['after IETF protocol block', '2001:200::', 'public'],
  ['before IETF protocol block', '2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'public'],
  ['benchmarking first', '2001:2::', 'benchmarking', '2001:2::/48'],
  ['benchmarking last', '2001:2:0:ffff:ffff:ffff:ffff:ffff', 'benchmarking'],
  ['after benchmarking', '2001:2:1::', 'ietf_protocol'],
  ['AMT', '2001:3::1', 'anycast_service', '2001:3::/32'],
  ['AS112-v6', '2001:4:112::1', 'anycast_service', '2001:4:112::/48'],
  ['AS112 direct delegation first', '2620:4f:8000::', 'anycast_service', '2620:4f:8000::/48'],
  ['before AS112 direct delegation', '2620:4f:7fff:ffff:ffff:ffff:ffff:ffff', 'public'],
  ['after AS112 direct delegation', '2620:4f:8001::', 'public'],
  ['ORCHID first', '2001:10::', 'orchid', '2001:10::/28'],
  ['ORCHID last', '2001:1f:ffff:ffff:ffff:ffff:ffff:ffff', 'orchid'],
  ['ORCHIDv2 first', '2001:20::', 'orchid', '2001:20::/28'],
  ['ORCHIDv2 last', '2001:2f:ffff:ffff:ffff:ffff:ffff:ffff', 'orchid'],
  ['DRIP DET', '2001:30::1', 'orchid', '2001:30::/28'],
  ['before 2001:db8::/32', '2001:db7:ffff:ffff:ffff:ffff:ffff:ffff', 'public'],
  ['documentation 2001:db8 first', '2001:db8::', 'documentation', '2001:db8::/32'],
  ['documentation 2001:db8 last', '2001:db8:ffff:ffff:ffff:ffff:ffff:ffff', 'documentation'],
  ['after 2001:db8::/32', '2001:db9::', 'public'],
  ['before 3fff::/20', '3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'public'],
  ['documentation 3fff first', '3fff::', 'documentation', '3fff::/20'],
  ['documentation 3fff last', '3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff', 'documentation'],
  ['after 3fff::/20', '3fff:1000::', 'public'],
  ['local-use NAT64 first', '64:ff9b:1::', 'nat64_local', '64:ff9b:1::/48'],
  ['local-use NAT64 last', '64:ff9b:1:ffff:ffff:ffff:ffff:ffff', 'nat64_local'],
  ['local-use NAT64 with public tail', '64:ff9b:1::808:808', 'nat64_local'],
  ['past NAT64 /96 is reserved', '64:ff9b::1:0:0', 'reserved', '::/8'],
  ['public Cloudflare DNS', '2606:4700:4700::1111', 'public'],
  ['upper-case hex', '2606:4700:4700::ABCD', 'public'],
];

const embedded: Row[] = [
  ['mapped loopback', '::ffff:127.0.0.1', 'loopback', 'ipv4-mapped'],
  ['mapped loopback, hex spelling', '::ffff:7f00:1', 'loopback', 'ipv4-mapped'],
  ['mapped IMDS', '::ffff:169.254.169.254', 'cloud_metadata', 'ipv4-mapped'],
  ['mapped unspecified', '::ffff:0.0.0.0', 'unspecified', '0.0.0.0/32'],
  ['mapped broadcast', '::ffff:255.255.255.255', 'broadcast'],
  ['mapped public', '::ffff:8.8.8.8', 'public'],
  ['mapped public, uncompressed', '0:0:0:0:0:ffff:808:808', 'public'],
  ['compatible loopback (R-38)', '::7f00:1', 'loopback', 'ipv4-compatible'],
  ['compatible private, dotted', '::10.0.0.1', 'private', 'ipv4-compatible'],
  ['compatible 0.0.0.2', '::2', 'this_network', 'ipv4-compatible'],
  ['compatible public is still denied', '::8.8.8.8', 'ipv4_compatible', '::/96'],
  ['compatible public, hex', '::808:808', 'ipv4_compatible', '::/96'],
  ['translated loopback (R-39)', '::ffff:0:7f00:1', 'loopback', 'ipv4-translated'],
  ['translated private, dotted', '::ffff:0:192.168.1.1', 'private', 'ipv4-translated'],
  ['translated public', '::ffff:0:8.8.8.8', 'public'],
  ['NAT64 public (R-42)', '64:ff9b::808:808', 'public'],
  ['NAT64 public, dotted', '64:ff9b::8.8.8.8', 'public'],
  ['NAT64 private', '64:ff9b::10.0.0.1', 'private', 'nat64'],
  ['NAT64 first', '64:ff9b::', 'unspecified', 'nat64'],
  ['NAT64 last', '64:ff9b::ffff:ffff', 'broadcast', 'nat64'],
  ['NAT64 Azure WireServer', '64:ff9b::a83f:8110', 'cloud_metadata', 'nat64'],
  ['6to4 IMDS (R-44)', '2002:a9fe:a9fe::1', 'cloud_metadata', '6to4'],
  ['6to4 loopback (R-45)', '2002:7f00:1::', 'loopback', '6to4'],
  ['6to4 first', '2002::', 'unspecified', '6to4'],
  ['6to4 last', '2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'broadcast', '6to4'],
  ['6to4 public', '2002:808:808::1', 'public'],
  ['6to4 CGNAT', '2002:6440:1::', 'cgnat', '6to4'],
  ['before 6to4', '2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'public'],
  ['after 6to4', '2003::', 'public'],
  ['Teredo, client is TEST-NET-1 (R-47)', '2001:0:4136:e378:8000:63bf:3fff:fdd2', 'documentation', 'teredo'],
  ['Teredo, both public', '2001:0:4136:e378:8000:63bf:f7f7:f7f7', 'public'],
  ['Teredo, client loopback', '2001:0:4136:e378:8000:63bf:80ff:fffe', 'loopback', 'teredo'],
  ['Teredo, server private', '2001:0:a00:1:8000:63bf:f7f7:f7f7', 'private', 'teredo'],
  ['Teredo, server IMDS', '2001:0:a9fe:a9fe::', 'cloud_metadata', 'teredo'],
  ['Teredo first', '2001::', 'unspecified', 'teredo'],
  ['after Teredo is IETF block', '2001:1::', 'ietf_protocol'],
];

const invalidInputs: Row[] = [
  ['empty', '', 'invalid', 'none'],
  ['name', 'example.com', 'invalid'],
  ['three parts', '127.1', 'invalid'],
  ['one number', '2130706433', 'invalid'],
  ['hex octet', '0x7f.0.0.1', 'invalid'],
  ['octal-looking octet', '0177.0.0.1', 'invalid'],
  ['leading zero', '010.0.0.1', 'invalid'],
  ['octet over 255', '256.0.0.1', 'invalid'],
  ['five parts', '1.2.3.4.5', 'invalid'],
  ['trailing dot', '1.2.3.4.', 'invalid'],
  ['space', ' 1.2.3.4', 'invalid'],
  ['zone id', 'fe80::1%eth0', 'invalid'],
  ['zone id on public', '2606:4700:4700::1111%1', 'invalid'],
  ['brackets', '[::1]', 'invalid'],
  ['two gaps', '1::2::3', 'invalid'],
  ['nine groups', '1:2:3:4:5:6:7:8:9', 'invalid'],
  ['gap with eight groups', '1:2:3:4:5:6:7::8', 'invalid'],
  ['gap with nine groups', '1::2:3:4:5:6:7:8:9', 'invalid'],
  ['eight groups then a gap', '1:2:3:4:5:6:7:8::', 'invalid'],
  ['seven groups', '1:2:3:4:5:6:7', 'invalid'],
  ['five hex digits', '00001::', 'invalid'],
  ['lone colon start', ':1::', 'invalid'],
  ['lone colon end', '1::2:', 'invalid'],
  ['triple colon', ':::', 'invalid'],
  ['bad hex', '2001:db8::g', 'invalid'],
  ['hex in embedded IPv4', '::ffff:0x7f.0.0.1', 'invalid'],
  ['embedded IPv4 not last', '::1.2.3.4:5', 'invalid'],
  ['embedded IPv4 too far right', '1:2:3:4:5:6:7:1.2.3.4', 'invalid'],
  ['embedded IPv4 too far right, with gap', '1::3:4:5:6:7:8:1.2.3.4', 'invalid'],
  ['port suffix', '1.2.3.4:443', 'invalid'],
  ['over-long', `${'0:'.repeat(30)}1`, 'invalid'],
];

for (const [title, rows] of [
  ['IPv4 ranges at their edges', v4Edges],
  ['IPv6 ranges at their edges', v6Edges],
  ['IPv4 embedded in IPv6 is judged by the IPv4 address', embedded],
  ['malformed input is invalid', invalidInputs],
] as const) {
  t.test(title, (tt) => {
    for (const row of rows) check(tt, row);
    tt.end();
  });
}

t.test('range table rows are canonical CIDRs with a source, listed once', (tt) => {
  const rows = [...IPV4_DENIED, ...IPV6_DENIED, ...IPV6_EMBEDDINGS];
  for (const r of rows) {
    const [addr, bits] = ipaddr.parseCIDR(r.cidr);
    // The verdict quotes the row's text, so it must be the network address in canonical form.
    const network = addr.kind() === 'ipv4' ? ipaddr.IPv4.networkAddressFromCIDR(r.cidr) : ipaddr.IPv6.networkAddressFromCIDR(r.cidr);
    tt.equal(r.cidr, `${network.toString()}/${bits}`, `${r.cidr} is canonical`);
    tt.ok(r.rfc.length > 0, `${r.cidr} cites its source`);
  }
  tt.equal(new Set(rows.map((r) => r.cidr)).size, rows.length, 'no CIDR listed twice');
  tt.end();
});

t.test('every address class is reachable by some row', (tt) => {
  const seen = new Set<string>();
  for (const [, address] of [...v4Edges, ...v6Edges, ...embedded, ...invalidInputs]) {
    const v = classifyAddress(address);
    if (!v.public) seen.add(v.addressClass);
  }
  tt.same([...seen].sort(), Object.keys(ADDRESS_CLASSES).sort());
  tt.end();
});

t.test('verdicts carry the address, the family and the embedded IPv4', (tt) => {
  tt.same(classifyAddress('8.8.8.8'), { public: true, address: '8.8.8.8', family: 4 });
  tt.same(classifyAddress('2606:4700:4700::1111'), { public: true, address: '2606:4700:4700::1111', family: 6 });
  tt.same(classifyAddress('2002:7f00:1::'), {
    public: false,
    address: '2002:7f00:1::',
    family: 6,
    addressClass: 'loopback',
    range: '127.0.0.0/8',
    via: '6to4',
    embedded: '127.0.0.1',
  });
  tt.same(classifyAddress('fe80::1%eth0'), { public: false, address: 'fe80::1%eth0', family: 6, addressClass: 'invalid', range: 'none' });
  tt.equal(classifyAddress(undefined as unknown as string).public, false, 'non-string input is denied, not thrown on');
  tt.end();
});

interface CorpusCase {
  readonly id: string;
  readonly dns: readonly string[];
  readonly expect: 'allow' | 'deny';
  readonly reason: string;
}
const corpus = JSON.parse(readFileSync(new URL('./address-class.corpus.json', import.meta.url), 'utf8')) as {
  readonly cases: readonly CorpusCase[];
};

t.test('corpus group R: deny when any answer is not public', (tt) => {
  tt.ok(corpus.cases.length > 20, 'fixture loaded');
  for (const c of corpus.cases) {
    const allPublic = c.dns.every((a) => classifyAddress(a).public);
    tt.equal(allPublic ? 'allow' : 'deny', c.expect, `${c.id}: ${c.reason}`);
  }
  tt.end();
});

// ---- properties ------------------------------------------------------------------------------


/** An independent reference: the denied IPv4 space as a plain list, most specific first. */
const REFERENCE_V4: readonly (readonly [string, AddressClassName])[] = [
  ['0.0.0.0/32', 'unspecified'], ['255.255.255.255/32', 'broadcast'],
  ['169.254.169.254/32', 'cloud_metadata'], ['169.254.170.2/32', 'cloud_metadata'],
  ['169.254.170.23/32', 'cloud_metadata'], ['168.63.129.16/32', 'cloud_metadata'],
  ['100.100.100.200/32', 'cloud_metadata'],
  ['192.0.0.0/24', 'ietf_protocol'], ['192.0.2.0/24', 'documentation'], ['198.51.100.0/24', 'documentation'],
  ['203.0.113.0/24', 'documentation'], ['192.88.99.0/24', '6to4_relay'], ['192.31.196.0/24', 'anycast_service'],
  ['192.52.193.0/24', 'anycast_service'], ['192.175.48.0/24', 'anycast_service'],
  ['169.254.0.0/16', 'link_local'], ['192.168.0.0/16', 'private'], ['198.18.0.0/15', 'benchmarking'],
  ['172.16.0.0/12', 'private'], ['100.64.0.0/10', 'cgnat'], ['0.0.0.0/8', 'this_network'],
  ['10.0.0.0/8', 'private'], ['127.0.0.0/8', 'loopback'], ['224.0.0.0/4', 'multicast'], ['240.0.0.0/4', 'reserved'],
];
const referenceRanges = REFERENCE_V4.map(([cidr, cls]) => ({ cls, range: ipaddr.IPv4.parseCIDR(cidr) }));

function referenceV4(n: number): Expect {
  const addr = ipaddr.IPv4.parse(v4String(n));
  return referenceRanges.find((r) => addr.match(r.range))?.cls ?? 'public';
}

function v4String(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

function outcome(v: AddressVerdict): Expect {
  return v.public ? 'public' : v.addressClass;
}

/** Uniform addresses, plus addresses at and just around every reference range's edges. */
const anyIPv4 = fc.oneof(
  fc.integer({ min: 0, max: 0xffffffff }),
  fc
    .tuple(fc.constantFrom(...referenceRanges), fc.integer({ min: -2, max: 2 }), fc.boolean())
    .map(([{ range }, delta, atEnd]) => {
      const [base, bits] = range;
      const first = ipaddr.IPv4.parse(base.toString()).toByteArray().reduce((a, b) => a * 256 + b, 0);
      const edge = atEnd ? first + 2 ** (32 - bits) - 1 : first;
      return Math.min(0xffffffff, Math.max(0, edge + delta));
    }),
);

t.test('IPv4 verdicts agree with an independent reference and with ipaddr.js', async (tt) => {
  await holds(
    tt,
    fc.property(anyIPv4, (n) => {
      const s = v4String(n);
      const got = outcome(classifyAddress(s));
      if (got !== referenceV4(n)) return false;
      // ipaddr.js names every special range; only the listed cloud metadata hosts go beyond it.
      const ipaddrSpecial = ipaddr.IPv4.parse(s).range() !== 'unicast';
      return got === 'public' ? !ipaddrSpecial : ipaddrSpecial || got === 'cloud_metadata';
    }),
    20_000,
  );
});

t.test('an IPv4 address gets the same verdict in every IPv6 wrapping that is judged by it', async (tt) => {
  const hex = (n: number): string => `${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  await holds(
    tt,
    fc.property(anyIPv4, (n) => {
      const want = outcome(classifyAddress(v4String(n)));
      const wrapped = [
        `::ffff:${v4String(n)}`,
        `::ffff:${hex(n)}`,
        `::ffff:0:${v4String(n)}`,
        `64:ff9b::${hex(n)}`,
        `2002:${hex(n)}::1`,
        // Teredo: public server 65.54.227.120, client stored inverted.
        `2001:0:4136:e378:8000:63bf:${hex(~n >>> 0)}`,
      ];
      return wrapped.every((w) => outcome(classifyAddress(w)) === want);
    }),
    5_000,
  );
});

/** Interesting IPv6 prefixes: every special range ipaddr.js knows, and the edges of 2000::/3. */
type Subnet = [ipaddr.IPv6, number];
const ipaddrV6Ranges = (ipaddr.IPv6.prototype as unknown as { SpecialRanges: Record<string, Subnet | Subnet[]> }).SpecialRanges;
const V6_PREFIXES: readonly (readonly [number[], number])[] = [
  ...Object.values(ipaddrV6Ranges)
    .flatMap((r): Subnet[] => (Array.isArray(r[0]) ? (r as Subnet[]) : [r as Subnet]))
    .map(([a, bits]) => [a.parts, bits] as const),
  [[0x2000, 0, 0, 0, 0, 0, 0, 0], 3],
  [[0x5f00, 0, 0, 0, 0, 0, 0, 0], 16],
  [[0x3fff, 0, 0, 0, 0, 0, 0, 0], 20],
  [[0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0], 112],
];

const hextets = fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 });
const anyIPv6Parts = fc.oneof(
  hextets,
  fc
    .tuple(fc.constantFrom(...V6_PREFIXES), hextets, fc.integer({ min: -4, max: 4 }))
    .map(([[base, bits], random, shift]) => {
      // Keep the prefix (give or take a few bits, to land next to the range too), randomise the rest.
      const keep = Math.min(128, Math.max(0, bits + shift));
      return random.map((r, i) => {
        const k = Math.min(16, Math.max(0, keep - 16 * i));
        const mask = k === 0 ? 0 : (0xffff << (16 - k)) & 0xffff;
        return ((base[i] ?? 0) & mask) | (r & ~mask & 0xffff);
      });
    }),
);

function spellings(parts: number[]): string[] {
  const addr = new ipaddr.IPv6(parts);
  const full = parts.map((p) => p.toString(16).padStart(4, '0')).join(':');
  const lastV4 = `${parts[6]! >> 8}.${parts[6]! & 255}.${parts[7]! >> 8}.${parts[7]! & 255}`;
  const withDottedTail = `${addr.toNormalizedString().split(':').slice(0, 6).join(':')}:${lastV4}`;
  return [addr.toString(), addr.toNormalizedString(), full, full.toUpperCase(), withDottedTail];
}

const EMBEDDING_RANGES = ['ipv4Mapped', 'rfc6145', '6to4', 'teredo'];

t.test('IPv6 verdicts agree with ipaddr.js and do not depend on the spelling', async (tt) => {
  await holds(
    tt,
    fc.property(anyIPv6Parts, (parts) => {
      const verdicts = spellings(parts).map((s) => classifyAddress(s));
      const first = verdicts[0]!;
      const sameVerdict = (v: AddressVerdict): boolean => JSON.stringify({ ...v, address: '' }) === JSON.stringify({ ...first, address: '' });
      if (!verdicts.every(sameVerdict)) return false;
      const addr = new ipaddr.IPv6(parts);
      const range = addr.range();
      const nat64 = addr.match(ipaddr.IPv6.parse('64:ff9b::'), 96);
      const compatible = addr.match(ipaddr.IPv6.parse('::'), 96);
      if (EMBEDDING_RANGES.includes(range) || nat64 || compatible) return true; // covered by the wrapping property
      // Global unicast is 2000::/3 only; inside it, public exactly where ipaddr.js sees plain unicast.
      const inGlobal = addr.match(ipaddr.IPv6.parse('2000::'), 3);
      return first.public === (inGlobal && range === 'unicast');
    }),
    20_000,
  );
});

t.test('IPv4-compatible addresses are denied even when the embedded IPv4 is public', async (tt) => {
  await holds(
    tt,
    fc.property(anyIPv4, (n) => !classifyAddress(`::${v4String(n)}`).public),
    2_000,
  );
});

/** Strings close to addresses, so the grammar's corners get hit; validity must match node:net. */
const addressLike = fc.string({
  unit: fc.constantFrom('0', '1', '2', '5', '9', 'a', 'f', 'F', 'g', ':', ':', ':', '.', '.', 'ff', '255', '256', '%', '::', 'ffff', '00'),
  maxLength: 20,
});

t.test('validity agrees with node:net isIP (zone ids aside)', async (tt) => {
  await holds(
    tt,
    fc.property(addressLike, (s) => {
      const valid = isIP(s) !== 0 && !s.includes('%');
      return (outcome(classifyAddress(s)) !== 'invalid') === valid;
    }),
    50_000,
  );
});

t.test('never throws, whatever the input', async (tt) => {
  await holds(
    tt,
    fc.property(fc.oneof(fc.string({ unit: 'binary' }), addressLike, fc.string({ maxLength: 60 })), (s) => {
      classifyAddress(s);
    }),
    20_000,
  );
});
