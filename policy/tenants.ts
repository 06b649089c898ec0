/**
 * Tenants of a shared egress proxy: one registration per sandbox network (a slot), naming the
 * sandbox, its lifecycle id, its network's subnet and its policy. A connection belongs to the
 * tenant whose subnet holds both its local and its remote address, never to what the client
 * says. Parsing and lookup only: the proxy reads the files (proxy/tenants/).
 */
import type Ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { requireCjs } from '../common/index.js';
import { PolicyError, PolicyFileSchema, readStrictText, type PolicyFile } from './policy-file.js';

const ipaddr = requireCjs('ipaddr.js') as typeof Ipaddr;

/** A sandbox name as the controller makes it (cap-<id>, the id of either case) or any name of that alphabet. */
const SANDBOX_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
/** A lifecycle id: what tells two sandboxes that had the same subnet (or name) apart. */
const LIFECYCLE = /^[A-Za-z0-9-]{8,64}$/;
/** Widest and narrowest subnets a sandbox network may have: a /16 is a whole pool, a /30 holds two hosts. */
const PREFIX_MIN = 16;
const PREFIX_MAX = 30;

/**
 * A slot file read for everything but its policy: vacant, or the registration's sandbox, lifecycle
 * id, subnet and address. Read apart so that a file whose policy is refused still says whose it is.
 */
const EnvelopeSchema = z.union([
  z.strictObject({
    version: z.literal(1),
    sandbox: z.string().regex(SANDBOX_NAME, 'a sandbox name: letters, digits, "_", "." and "-", at most 63'),
    lifecycle: z.string().regex(LIFECYCLE, 'a lifecycle id: 8 to 64 letters, digits and "-"'),
    subnet: z.string().describe('The IPv4 subnet of the sandbox network (10.200.0.0/28).'),
    address: z.string().describe('The proxy\'s own address on that network: where it answers DNS, and what allowed names resolve to.'),
    policy: z.unknown().describe('The sandbox\'s policy (PolicyFileSchema), parsed by parseSlotPolicy.'),
  }),
  z.strictObject({ version: z.literal(1), vacant: z.literal(true) }),
]);

export interface Subnet {
  /** As written, normalised: `10.200.0.0/28`. */
  readonly text: string;
  readonly prefix: number;
  /** The network address as a 32-bit number. */
  readonly base: number;
}

export interface TenantRegistration {
  readonly sandbox: string;
  readonly lifecycle: string;
  readonly subnet: Subnet;
  /** The proxy's address on the network, dotted decimal: a host address of the subnet. */
  readonly address: string;
  readonly policy: PolicyFile;
}

/** A slot's file: a sandbox's registration, or vacant (its sandbox is gone; nothing is served). */
export type SlotFile = { readonly vacant: true } | ({ readonly vacant: false } & TenantRegistration);

/** A slot's file with its policy not yet parsed (parseSlotPolicy). */
export type SlotEnvelope = { readonly vacant: true } | ({ readonly vacant: false; readonly policy: unknown } & Omit<TenantRegistration, 'policy'>);

function toNumber(address: Ipaddr.IPv4): number {
  const [a = 0, b = 0, c = 0, d = 0] = address.octets;
  return ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
}

function maskOf(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/** `text` as a subnet whose host bits are zero, or the problem with it. */
export function parseSubnet(text: string): { ok: true; subnet: Subnet } | { ok: false; problem: string } {
  let parsed: [Ipaddr.IPv4, number];
  try {
    const cidr = ipaddr.parseCIDR(text);
    if (cidr[0].kind() !== 'ipv4') return { ok: false, problem: `${JSON.stringify(text)} is not an IPv4 subnet` };
    parsed = cidr as [Ipaddr.IPv4, number];
  } catch {
    return { ok: false, problem: `${JSON.stringify(text)} is not a subnet (write a.b.c.d/n)` };
  }
  const [address, prefix] = parsed;
  // One spelling only: a leading zero is octal to some readers and decimal to others.
  if (`${address.toString()}/${prefix}` !== text) return { ok: false, problem: `${JSON.stringify(text)} is not a subnet in dotted decimal (write a.b.c.d/n)` };
  if (prefix < PREFIX_MIN || prefix > PREFIX_MAX) return { ok: false, problem: `a /${prefix} is not a sandbox network's size (/${PREFIX_MIN} to /${PREFIX_MAX})` };
  const value = toNumber(address);
  const base = (value & maskOf(prefix)) >>> 0;
  if (base !== value) return { ok: false, problem: `${text} has host bits set: write ${ipaddr.fromByteArray([base >>> 24, (base >>> 16) & 255, (base >>> 8) & 255, base & 255]).toString()}/${prefix}` };
  return { ok: true, subnet: { text: `${address.toString()}/${prefix}`, prefix, base } };
}

/** Parses a slot file's text (JSON, or YAML; a duplicate key is an error); `source` names it in errors. */
export function parseSlotFile(text: string, source: string): SlotFile {
  return parseSlotPolicy(parseSlotEnvelope(text, source), source);
}

/** Parses a slot file's text but its policy: whether it is vacant, and whose registration it is. */
export function parseSlotEnvelope(text: string, source: string): SlotEnvelope {
  const { value } = readStrictText(text, source);
  const result = EnvelopeSchema.safeParse(value);
  if (!result.success) {
    const issues = result.error.issues.flatMap((i) => (i.code === 'invalid_union' ? (i.errors[0] ?? []).map((e) => ({ ...e, path: [...i.path, ...e.path] })) : [i]));
    throw new PolicyError(source, issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })));
  }
  const data = result.data;
  if ('vacant' in data) return { vacant: true };
  const subnet = parseSubnet(data.subnet);
  if (!subnet.ok) throw new PolicyError(source, [{ path: 'subnet', message: subnet.problem }]);
  const address = ipv4Number(data.address);
  const last = subnet.subnet.base + 2 ** (32 - subnet.subnet.prefix) - 1;
  if (address === undefined || !/^\d+\.\d+\.\d+\.\d+$/.test(data.address) || ipaddr.parse(data.address).toString() !== data.address) {
    throw new PolicyError(source, [{ path: 'address', message: `${JSON.stringify(data.address)} is not an IPv4 address in dotted decimal` }]);
  }
  if (!subnetHolds(subnet.subnet, address) || address === subnet.subnet.base || address === last) {
    throw new PolicyError(source, [{ path: 'address', message: `${data.address} is not a host address of ${subnet.subnet.text}` }]);
  }
  return { vacant: false, sandbox: data.sandbox, lifecycle: data.lifecycle, subnet: subnet.subnet, address: data.address, policy: data.policy };
}

/** The slot file an envelope is, its policy parsed; `source` names it in errors. */
export function parseSlotPolicy(envelope: SlotEnvelope, source: string): SlotFile {
  if (envelope.vacant) return envelope;
  const result = PolicyFileSchema.safeParse(envelope.policy);
  if (!result.success) throw new PolicyError(source, result.error.issues.map((i) => ({ path: ['policy', ...i.path].map(String).join('.'), message: i.message })));
  return { ...envelope, policy: result.data };
}

/** The address as a 32-bit number, when it is IPv4 (an IPv4-mapped IPv6 spelling included). */
export function ipv4Number(address: string): number | undefined {
  if (!ipaddr.isValid(address)) return undefined;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6') {
    const v6 = parsed as Ipaddr.IPv6;
    if (!v6.isIPv4MappedAddress()) return undefined;
    parsed = v6.toIPv4Address();
  }
  return toNumber(parsed as Ipaddr.IPv4);
}

export function subnetHolds(subnet: Subnet, address: number): boolean {
  return ((address & maskOf(subnet.prefix)) >>> 0) === subnet.base;
}

/** Whether two subnets share an address. */
export function subnetsOverlap(a: Subnet, b: Subnet): boolean {
  const prefix = Math.min(a.prefix, b.prefix);
  return ((a.base & maskOf(prefix)) >>> 0) === ((b.base & maskOf(prefix)) >>> 0);
}

export type TenantLookup<T> = { readonly ok: true; readonly tenant: T } | { readonly ok: false; readonly detail: string };

/**
 * The registered tenants by subnet. Subnets that overlap serve nobody in their common part: a
 * connection there could be either sandbox's, and is refused (the proxy logs the overlap).
 */
export class TenantTable<T extends { readonly subnet: Subnet }> {
  private readonly byPrefix = new Map<number, Map<number, T[]>>();

  constructor(readonly tenants: readonly T[]) {
    for (const tenant of tenants) {
      const { prefix, base } = tenant.subnet;
      let bases = this.byPrefix.get(prefix);
      if (bases === undefined) this.byPrefix.set(prefix, (bases = new Map()));
      bases.set(base, [...(bases.get(base) ?? []), tenant]);
    }
  }

  /** Every pair of tenants whose subnets overlap. */
  overlaps(): Array<[T, T]> {
    const pairs: Array<[T, T]> = [];
    const sorted = [...this.tenants].sort((a, b) => a.subnet.base - b.subnet.base || a.subnet.prefix - b.subnet.prefix);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const [a, b] = [sorted[i] as T, sorted[j] as T];
        // Sorted by base: once b starts past a's end, no later one overlaps a.
        if (b.subnet.base > a.subnet.base + (2 ** (32 - a.subnet.prefix) - 1)) break;
        if (subnetsOverlap(a.subnet, b.subnet)) pairs.push([a, b]);
      }
    }
    return pairs;
  }

  /** The tenant whose subnet holds both addresses (a connection's local and remote). */
  identify(local: string, remote: string): TenantLookup<T> {
    const l = ipv4Number(local);
    const r = ipv4Number(remote);
    if (l === undefined || r === undefined) return { ok: false, detail: `${remote} to ${local} is not an IPv4 connection of a sandbox network` };
    const found: T[] = [];
    for (const [prefix, bases] of this.byPrefix) {
      const base = (r & maskOf(prefix)) >>> 0;
      for (const tenant of bases.get(base) ?? []) if (subnetHolds(tenant.subnet, l)) found.push(tenant);
    }
    if (found.length === 1) return { ok: true, tenant: found[0] as T };
    if (found.length === 0) return { ok: false, detail: `no registered sandbox network holds both ${remote} and ${local}` };
    return { ok: false, detail: `${found.length} registered sandbox networks hold ${remote} (${found.map((t) => t.subnet.text).join(', ')}); none is served until one is removed` };
  }
}
