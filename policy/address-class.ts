/**
 * Classifies one resolved IP address as public unicast or as the class that denies it. The
 * allowlist checks names, but the proxy dials addresses: a listed name whose DNS answer is
 * 127.0.0.1, 169.254.169.254 or ::ffff:10.0.0.1 must still be refused.
 *
 * Parsing is strict and hand-written: only the forms inet_pton accepts (dotted decimal without
 * leading zeros; RFC 4291 text IPv6 without zone id). ipaddr.js is the reference (it compiles the
 * range table here and checks this parser in the tests), but its parser costs ~2 µs per IPv6
 * address against a 1 µs budget, and it is lenient in ways a security check must not be: it
 * reads `0x7f.1` and `0177.0.0.1` as 127.0.0.1 and turns `::1.2.3.4` into `::ffff:1.2.3.4`.
 * Anything else is denied as 'invalid' rather than guessed at.
 */
import type Ipaddr from 'ipaddr.js';
import { requireCjs } from '../common/index.js';
import {
  ADDRESS_CLASSES,
  IPV4_DENIED,
  IPV6_DENIED,
  IPV6_EMBEDDINGS,
  type AddressClassName,
  type DeniedRange,
  type Embedding,
  type EmbeddingRange,
} from './address-ranges.js';

const ipaddr = requireCjs('ipaddr.js') as typeof Ipaddr;

export { ADDRESS_CLASSES, type AddressClassName, type Embedding };

export type AddressVerdict =
  | { readonly public: true; readonly address: string; readonly family: 4 | 6 }
  | {
      readonly public: false;
      readonly address: string;
      readonly family: 4 | 6;
      readonly addressClass: AddressClassName;
      /** The CIDR that matched, e.g. '10.0.0.0/8'; 'none' for 'invalid'. */
      readonly range: string;
      /** Set when an IPv4 address embedded in an IPv6 one was judged. */
      readonly via?: Embedding;
      /** The embedded IPv4 address that was judged, with `via`. */
      readonly embedded?: string;
    };

/** Classifies one textual IP address as returned by a DNS lookup. Never throws: unparsable input is denied with addressClass 'invalid'. */
export function classifyAddress(address: string): AddressVerdict {
  if (typeof address !== 'string') return invalid('', 4);
  if (address.indexOf(':') >= 0) return classifyIPv6(address);
  const v4 = address.length <= 15 ? parseIPv4(address, 0, address.length) : -1;
  if (v4 < 0) return invalid(address, 4);
  const hit = matchIPv4(v4);
  if (hit === undefined) return { public: true, address, family: 4 };
  return { public: false, address, family: 4, addressClass: hit.addressClass, range: hit.cidr };
}

function invalid(address: string, family: 4 | 6): AddressVerdict {
  return { public: false, address, family, addressClass: 'invalid', range: 'none' };
}

// ---- compiled tables -------------------------------------------------------------------------

/** Most specific first, so a /32 cloud-metadata row names the address before its /16 does. */
function bySpecificity<T extends { readonly cidr: string }>(rows: readonly T[]): T[] {
  const len = (r: T): number => Number(r.cidr.slice(r.cidr.indexOf('/') + 1));
  return [...rows].sort((a, b) => len(b) - len(a));
}

function maskWord(prefix: number, word: number): number {
  const bits = Math.min(32, Math.max(0, prefix - 32 * word));
  return bits === 0 ? 0 : (0xffffffff << (32 - bits)) | 0;
}

const V4_ROWS = bySpecificity(IPV4_DENIED);
const V4_BASE = new Int32Array(V4_ROWS.length);
const V4_MASK = new Int32Array(V4_ROWS.length);
V4_ROWS.forEach((r, i) => {
  const [addr, prefix] = ipaddr.IPv4.parseCIDR(r.cidr);
  const [a = 0, b = 0, c = 0, d = 0] = addr.octets;
  V4_MASK[i] = maskWord(prefix, 0);
  V4_BASE[i] = ((a << 24) | (b << 16) | (c << 8) | d) & maskWord(prefix, 0);
});

function matchIPv4(n: number): DeniedRange | undefined {
  const x = n | 0;
  for (let i = 0; i < V4_BASE.length; i++) {
    if ((x & V4_MASK[i]!) === V4_BASE[i]) return V4_ROWS[i];
  }
  return undefined;
}

type V6Row = DeniedRange | EmbeddingRange;
const V6_ROWS: readonly V6Row[] = bySpecificity<V6Row>([...IPV6_DENIED, ...IPV6_EMBEDDINGS]);
/** Four 32-bit words of base and of mask per row. */
const V6_BASE = new Int32Array(V6_ROWS.length * 4);
const V6_MASK = new Int32Array(V6_ROWS.length * 4);
V6_ROWS.forEach((r, i) => {
  const [addr, prefix] = ipaddr.IPv6.parseCIDR(r.cidr);
  for (let w = 0; w < 4; w++) {
    const word = ((addr.parts[2 * w]! << 16) | addr.parts[2 * w + 1]!) & maskWord(prefix, w);
    V6_BASE[4 * i + w] = word;
    V6_MASK[4 * i + w] = maskWord(prefix, w);
  }
});

// ---- IPv6 ------------------------------------------------------------------------------------

/** Parse target. Classification is synchronous, so one buffer serves every call without garbage. */
const groups = new Uint16Array(8);

function classifyIPv6(address: string): AddressVerdict {
  // A zone id (fe80::1%eth0) names an interface, not a destination; parseIPv6 rejects '%'.
  if (!parseIPv6(address)) return invalid(address, 6);
  const w0 = ((groups[0]! << 16) | groups[1]!) | 0;
  const w1 = ((groups[2]! << 16) | groups[3]!) | 0;
  const w2 = ((groups[4]! << 16) | groups[5]!) | 0;
  const w3 = ((groups[6]! << 16) | groups[7]!) | 0;
  let i = 0;
  for (; i < V6_ROWS.length; i++) {
    const k = 4 * i;
    if (
      (w0 & V6_MASK[k]!) === V6_BASE[k] &&
      (w1 & V6_MASK[k + 1]!) === V6_BASE[k + 1] &&
      (w2 & V6_MASK[k + 2]!) === V6_BASE[k + 2] &&
      (w3 & V6_MASK[k + 3]!) === V6_BASE[k + 3]
    ) {
      break;
    }
  }
  const hit = V6_ROWS[i];
  if (hit === undefined) return { public: true, address, family: 6 };
  if ('addressClass' in hit) {
    return { public: false, address, family: 6, addressClass: hit.addressClass, range: hit.cidr };
  }
  switch (hit.via) {
    case '6to4':
      // 2002:AABB:CCDD::/48 is the 6to4 site of IPv4 AA.BB.CC.DD; a relay delivers to it.
      return judgeEmbedded(address, hit.via, ((w0 << 16) | (w1 >>> 16)) >>> 0);
    case 'teredo': {
      // 2001:0:SERVER:flags:port:~CLIENT (RFC 4380 §4): the client address is stored inverted so
      // NATs do not rewrite it. Either end being private lets the tunnel reach inside.
      const server = judgeEmbedded(address, hit.via, w1 >>> 0);
      return server.public ? judgeEmbedded(address, hit.via, ~w3 >>> 0) : server;
    }
    case 'ipv4-compatible': {
      // ::/96 is deprecated (RFC 4291 §2.5.5.1) and no resolver should return it; some stacks
      // still tunnel it automatically, so deny it whatever it embeds, naming a worse class first.
      const inner = judgeEmbedded(address, hit.via, w3 >>> 0);
      return inner.public
        ? { public: false, address, family: 6, addressClass: 'ipv4_compatible', range: hit.cidr }
        : inner;
    }
    default:
      // Mapped, translated and NAT64 forms carry the IPv4 address in the last 32 bits.
      return judgeEmbedded(address, hit.via, w3 >>> 0);
  }
}

function judgeEmbedded(address: string, via: Embedding, v4: number): AddressVerdict {
  const hit = matchIPv4(v4);
  if (hit === undefined) return { public: true, address, family: 6 };
  const embedded = `${v4 >>> 24}.${(v4 >>> 16) & 255}.${(v4 >>> 8) & 255}.${v4 & 255}`;
  return { public: false, address, family: 6, addressClass: hit.addressClass, range: hit.cidr, via, embedded };
}

// ---- strict parsers --------------------------------------------------------------------------

const COLON = 58;
const DOT = 46;

/** Dotted decimal s[start, end) as an unsigned 32-bit number, or -1. No leading zeros, as inet_pton. */
function parseIPv4(s: string, start: number, end: number): number {
  let value = 0;
  let parts = 0;
  let i = start;
  while (parts < 4) {
    const first = i;
    let octet = 0;
    while (i < end) {
      const d = s.charCodeAt(i) - 48;
      if (d < 0 || d > 9) break;
      octet = octet * 10 + d;
      i++;
    }
    const digits = i - first;
    // 010 is 8 to inet_aton and 10 to others: a spelling two parsers disagree on is refused.
    if (digits === 0 || digits > 3 || octet > 255 || (digits > 1 && s.charCodeAt(first) === 48)) return -1;
    value = value * 256 + octet;
    parts++;
    if (parts < 4) {
      if (i >= end || s.charCodeAt(i) !== DOT) return -1;
      i++;
    }
  }
  return i === end ? value : -1;
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  const lower = c | 0x20;
  return lower >= 97 && lower <= 102 ? lower - 87 : -1;
}

/** RFC 4291 §2.2 text form into `groups`; false if malformed. */
function parseIPv6(s: string): boolean {
  const n = s.length;
  if (n < 2 || n > 45) return false;
  let count = 0;
  let gap = -1;
  let i = 0;
  if (s.charCodeAt(0) === COLON) {
    if (s.charCodeAt(1) !== COLON) return false;
    gap = 0;
    i = 2;
  }
  while (i < n) {
    if (count === 8) return false;
    const start = i;
    let value = 0;
    let h: number;
    while (i < n && (h = hexValue(s.charCodeAt(i))) >= 0) {
      value = value * 16 + h;
      i++;
    }
    if (i < n && s.charCodeAt(i) === DOT) {
      // Trailing dotted quad (RFC 4291 §2.2 form 3): fills the last two groups.
      const v4 = count <= 6 ? parseIPv4(s, start, n) : -1;
      if (v4 < 0) return false;
      groups[count++] = v4 >>> 16;
      groups[count++] = v4 & 0xffff;
      i = n;
      break;
    }
    if (i === start || i - start > 4) return false;
    groups[count++] = value;
    if (i === n) break;
    if (s.charCodeAt(i) !== COLON) return false;
    i++;
    if (i === n) return false;
    if (s.charCodeAt(i) === COLON) {
      if (gap >= 0) return false;
      gap = count;
      i++;
    }
  }
  if (gap < 0) return count === 8;
  // '::' stands for at least one zero group, so eight explicit groups plus '::' is malformed.
  if (count === 8) return false;
  const tail = count - gap;
  for (let k = 1; k <= tail; k++) groups[8 - k] = groups[count - k]!;
  for (let k = gap; k < 8 - tail; k++) groups[k] = 0;
  return true;
}
