/**
 * The address ranges the egress proxy refuses to dial, as data. A name on the allowlist can still
 * resolve to anything (DNS rebinding, a hostile or careless zone), so every answer is checked
 * against these rows. Sources: the IANA IPv4 and IPv6 Special-Purpose Address Registries and the
 * IANA IPv6 Address Space registry. address-class.ts compiles the rows once; the most specific
 * row wins, so row order here is for the reader only.
 */

/** Every reason an address is denied, with the words the denial uses. Keys are stable codes. */
export const ADDRESS_CLASSES = {
  invalid: 'not a textual IPv4 or IPv6 address',
  unspecified: 'unspecified address',
  this_network: '"this network" (0.0.0.0/8)',
  loopback: 'loopback',
  private: 'private network (RFC 1918)',
  link_local: 'link-local',
  cgnat: 'carrier-grade NAT shared space',
  ietf_protocol: 'IETF protocol assignment',
  documentation: 'documentation range',
  benchmarking: 'benchmarking range',
  anycast_service: 'special-purpose anycast service (AS112, AMT)',
  '6to4_relay': '6to4 relay anycast',
  reserved: 'reserved address space',
  broadcast: 'limited broadcast',
  multicast: 'multicast',
  cloud_metadata: 'cloud instance metadata service',
  unique_local: 'unique local address (ULA)',
  site_local: 'deprecated site-local',
  discard: 'discard-only prefix',
  orchid: 'ORCHID / DET overlay identifier',
  srv6_sid: 'SRv6 segment identifier',
  nat64_local: 'local-use NAT64 prefix',
  ipv4_compatible: 'deprecated IPv4-compatible IPv6 address',
} as const;

export type AddressClassName = keyof typeof ADDRESS_CLASSES;

/** A range that is denied outright. */
export interface DeniedRange {
  readonly cidr: string;
  readonly addressClass: AddressClassName;
  readonly rfc: string;
}

/** IPv6 forms that carry an IPv4 address; the embedded address is judged instead. */
export type Embedding = 'ipv4-mapped' | 'ipv4-compatible' | 'ipv4-translated' | 'nat64' | '6to4' | 'teredo';

export interface EmbeddingRange {
  readonly cidr: string;
  readonly via: Embedding;
  readonly rfc: string;
}

const row = (cidr: string, addressClass: AddressClassName, rfc: string): DeniedRange => ({ cidr, addressClass, rfc });

export const IPV4_DENIED: readonly DeniedRange[] = [
  // Instance metadata hands out cloud credentials; naming them makes the denial self-explaining.
  // 168.63.129.16 is the only one that is not inside a denied range anyway.
  row('169.254.169.254/32', 'cloud_metadata', 'AWS/GCP/Azure/OCI/DigitalOcean IMDS'),
  row('169.254.170.2/32', 'cloud_metadata', 'AWS ECS task metadata and credentials'),
  row('169.254.170.23/32', 'cloud_metadata', 'AWS EKS Pod Identity agent'),
  row('168.63.129.16/32', 'cloud_metadata', 'Azure WireServer (publicly routed space, host-local)'),
  row('100.100.100.200/32', 'cloud_metadata', 'Alibaba Cloud metadata'),

  row('0.0.0.0/32', 'unspecified', 'RFC 1122 §3.2.1.3; Linux dials it as localhost'),
  row('0.0.0.0/8', 'this_network', 'RFC 791, RFC 1122 §3.2.1.3'),
  row('10.0.0.0/8', 'private', 'RFC 1918'),
  row('100.64.0.0/10', 'cgnat', 'RFC 6598'),
  row('127.0.0.0/8', 'loopback', 'RFC 1122 §3.2.1.3'),
  row('169.254.0.0/16', 'link_local', 'RFC 3927'),
  row('172.16.0.0/12', 'private', 'RFC 1918'),
  // The whole /24, although IANA marks 192.0.0.9 (PCP anycast, RFC 7723) and 192.0.0.10 (TURN
  // anycast, RFC 8155) globally reachable: both reach the access network operator's own service,
  // which no HTTP(S) workload needs, and the rest (DS-Lite, NAT64 discovery) is host-local.
  row('192.0.0.0/24', 'ietf_protocol', 'RFC 6890 §2.2.2'),
  row('192.0.2.0/24', 'documentation', 'RFC 5737 TEST-NET-1'),
  // AS112 and AMT are globally routed anycast, but an egress workload never needs a sink for
  // private-zone DNS queries or a multicast tunnel relay; denying them keeps this table a superset
  // of ipaddr.js's special ranges, which the tests check.
  row('192.31.196.0/24', 'anycast_service', 'RFC 7535 AS112-v4'),
  row('192.52.193.0/24', 'anycast_service', 'RFC 7450 AMT'),
  row('192.88.99.0/24', '6to4_relay', 'RFC 3068, deprecated by RFC 7526'),
  row('192.168.0.0/16', 'private', 'RFC 1918'),
  row('192.175.48.0/24', 'anycast_service', 'RFC 7534 AS112 direct delegation'),
  row('198.18.0.0/15', 'benchmarking', 'RFC 2544'),
  row('198.51.100.0/24', 'documentation', 'RFC 5737 TEST-NET-2'),
  row('203.0.113.0/24', 'documentation', 'RFC 5737 TEST-NET-3'),
  row('224.0.0.0/4', 'multicast', 'RFC 5771'),
  row('240.0.0.0/4', 'reserved', 'RFC 1112 §4'),
  row('255.255.255.255/32', 'broadcast', 'RFC 919, RFC 8190'),
];

export const IPV6_DENIED: readonly DeniedRange[] = [
  row('fd00:ec2::254/128', 'cloud_metadata', 'AWS IMDS over IPv6'),
  row('fd00:ec2::23/128', 'cloud_metadata', 'AWS EKS Pod Identity agent over IPv6'),
  row('fd20:ce::254/128', 'cloud_metadata', 'GCP metadata server over IPv6'),

  row('::/128', 'unspecified', 'RFC 4291 §2.5.2'),
  row('::1/128', 'loopback', 'RFC 4291 §2.5.3'),
  row('64:ff9b:1::/48', 'nat64_local', 'RFC 8215: local-use, translates to any IPv4 the site likes'),
  row('100::/64', 'discard', 'RFC 6666'),
  // The IETF block is not global by default (RFC 6890); Teredo inside it is judged by embedding.
  row('2001::/23', 'ietf_protocol', 'RFC 2928, RFC 6890'),
  row('2001:2::/48', 'benchmarking', 'RFC 5180'),
  row('2001:3::/32', 'anycast_service', 'RFC 7450 AMT'),
  row('2001:4:112::/48', 'anycast_service', 'RFC 7535 AS112-v6'),
  row('2001:10::/28', 'orchid', 'RFC 4843 ORCHID, deprecated'),
  row('2001:20::/28', 'orchid', 'RFC 7343 ORCHIDv2'),
  row('2001:30::/28', 'orchid', 'RFC 9374 DRIP entity tags (ORCHIDv2-based)'),
  row('2001:db8::/32', 'documentation', 'RFC 3849'),
  row('2620:4f:8000::/48', 'anycast_service', 'RFC 7534 AS112 direct delegation'),
  row('3fff::/20', 'documentation', 'RFC 9637'),
  row('5f00::/16', 'srv6_sid', 'RFC 9602'),
  row('fc00::/7', 'unique_local', 'RFC 4193'),
  row('fe80::/10', 'link_local', 'RFC 4291 §2.5.6'),
  row('fec0::/10', 'site_local', 'RFC 3879'),
  row('ff00::/8', 'multicast', 'RFC 4291 §2.7'),

  // Global unicast is 2000::/3 only (RFC 4291 §2.4). These rows are the rest of the space as the
  // IANA IPv6 Address Space registry lists it "Reserved by IETF"; with fc00::/7, fe80::/10,
  // fec0::/10 and ff00::/8 above they cover everything outside 2000::/3, which the tests check.
  row('::/8', 'reserved', 'RFC 4291'),
  row('100::/8', 'reserved', 'RFC 4291'),
  row('200::/7', 'reserved', 'RFC 4048'),
  row('400::/6', 'reserved', 'RFC 4291'),
  row('800::/5', 'reserved', 'RFC 4291'),
  row('1000::/4', 'reserved', 'RFC 4291'),
  row('4000::/3', 'reserved', 'RFC 4291'),
  row('6000::/3', 'reserved', 'RFC 4291'),
  row('8000::/3', 'reserved', 'RFC 4291'),
  row('a000::/3', 'reserved', 'RFC 4291'),
  row('c000::/3', 'reserved', 'RFC 4291'),
  row('e000::/4', 'reserved', 'RFC 4291'),
  row('f000::/5', 'reserved', 'RFC 4291'),
  row('f800::/6', 'reserved', 'RFC 4291'),
  row('fe00::/9', 'reserved', 'RFC 4291'),
];

export const IPV6_EMBEDDINGS: readonly EmbeddingRange[] = [
  // Dialed as plain IPv4 by a dual-stack socket: without this, ::ffff:127.0.0.1 skips every IPv4 row.
  { cidr: '::ffff:0:0/96', via: 'ipv4-mapped', rfc: 'RFC 4291 §2.5.5.2' },
  // Deprecated; denied even with a public embedded address (see address-class.ts).
  { cidr: '::/96', via: 'ipv4-compatible', rfc: 'RFC 4291 §2.5.5.1' },
  { cidr: '::ffff:0:0:0/96', via: 'ipv4-translated', rfc: 'RFC 2765 §2.1 (SIIT)' },
  // A NAT64 gateway on the path turns 64:ff9b::a00:1 into a connection to 10.0.0.1.
  { cidr: '64:ff9b::/96', via: 'nat64', rfc: 'RFC 6052 §2.1' },
  { cidr: '2002::/16', via: '6to4', rfc: 'RFC 3056 §2' },
  { cidr: '2001::/32', via: 'teredo', rfc: 'RFC 4380 §4' },
];
