/**
 * The address space of sandbox networks. Docker's default pools give every network a /16 or a
 * /20 and hold about 30 networks per engine; a sandbox network instead gets a small subnet (a /28
 * by default) carved from the deployment's `addressPool`. Allocation needs no state shared by
 * controller processes: the subnets a network may take are a fixed sequence derived from its name
 * (a hash picks the first and the stride), and the engine is the arbiter, since it refuses a
 * subnet that overlaps any other network's; a refused candidate moves on to the next. Pure.
 *
 * Inside a subnet, dynamic addresses come from its lower half only (IPRange: the gateway Docker
 * reserves, then the sandbox), and the egress proxy takes the last usable address, outside that
 * range: a fixed address no dynamic allocation can take first, kept by a rebuilt proxy, that the
 * sandbox's DNS can point at.
 */
import { createHash } from 'node:crypto';
import { SandboxError } from './errors.js';

/** RFC 1918: a pool anywhere else could shadow public addresses the sandbox should reach. */
export const PRIVATE_RANGES: ReadonlyArray<readonly [number, number]> = [
  [0x0a000000, 8], // 10.0.0.0/8
  [0xac100000, 12], // 172.16.0.0/12
  [0xc0a80000, 16], // 192.168.0.0/16
];

/** Bounds of a sandbox subnet: a /29 holds the gateway, the sandbox and its proxy; larger than a /24 is waste. */
export const SUBNET_PREFIX_MIN = 24;
export const SUBNET_PREFIX_MAX = 29;
/** The controller's own range unless the operator picks another: 4,096 /28 subnets. */
export const DEFAULT_ADDRESS_POOL = '10.213.0.0/16';
export const DEFAULT_SUBNET_PREFIX = 28;

interface Cidr {
  readonly base: number;
  readonly prefix: number;
}

export interface AddressPool extends Cidr {
  /** Prefix length of each sandbox subnet. */
  readonly subnetPrefix: number;
  /** How many subnets the pool holds. */
  readonly size: number;
}

/** The addresses of one sandbox network. */
export interface SandboxSubnet {
  /** `a.b.c.d/p`, as the network create names it. */
  readonly subnet: string;
  /** Its lower half: where Docker gives addresses (gateway, sandbox). */
  readonly ipRange: string;
  /**
   * The first address: dockerd's gateway, named in the create so that inspect lists it (on a
   * bridge without a host address nothing holds it, which the isolation proof checks).
   */
  readonly gateway: string;
  /** The last usable address: the egress proxy's, outside `ipRange`. */
  readonly egressAddress: string;
}

const DOTTED = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/;

function parseAddress(text: string): number | undefined {
  const m = DOTTED.exec(text);
  if (m === null) return undefined;
  const octets = m.slice(1).map(Number);
  if (octets.some((o) => o > 255)) return undefined;
  return octets.reduce((a, o) => a * 256 + o, 0);
}

function formatAddress(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');
}

function blockSize(prefix: number): number {
  return 2 ** (32 - prefix);
}

function contains(outer: Cidr, inner: Cidr): boolean {
  return inner.prefix >= outer.prefix && inner.base >= outer.base && inner.base + blockSize(inner.prefix) <= outer.base + blockSize(outer.prefix);
}

/** A canonical IPv4 CIDR (`10.213.0.0/16`: dotted decimal, no host bits), or why not. */
function parseCidr(text: string): Cidr | string {
  const slash = text.indexOf('/');
  const base = parseAddress(slash < 0 ? text : text.slice(0, slash));
  const prefixText = slash < 0 ? '' : text.slice(slash + 1);
  if (base === undefined || !/^(0|[1-9]\d?)$/.test(prefixText) || Number(prefixText) > 32) {
    return 'must be an IPv4 CIDR block in dotted decimal, like 10.213.0.0/16';
  }
  const prefix = Number(prefixText);
  if (base % blockSize(prefix) !== 0) return `has host bits set (the block starts at ${formatAddress(base - (base % blockSize(prefix)))}/${prefix})`;
  return { base, prefix };
}

/** Why `text` cannot be an address pool with subnets of `subnetPrefix`, or undefined. */
export function addressPoolProblem(text: string, subnetPrefix: number): string | undefined {
  const cidr = parseCidr(text);
  if (typeof cidr === 'string') return cidr;
  if (!PRIVATE_RANGES.some(([base, prefix]) => contains({ base, prefix }, cidr))) {
    return 'must lie inside a private range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16), as the socket proxy requires';
  }
  if (cidr.prefix > subnetPrefix) return `is smaller than one sandbox subnet (/${subnetPrefix})`;
  return undefined;
}

/** The pool of a deployment config (parseDeploymentConfig has checked it already). */
export function parseAddressPool(text: string, subnetPrefix: number): AddressPool {
  const problem = addressPoolProblem(text, subnetPrefix);
  const cidr = parseCidr(text);
  if (problem !== undefined || typeof cidr === 'string') {
    throw new SandboxError('invalid_config', `extensionConfig."sandbox-docker".addressPool ${JSON.stringify(text)} ${problem ?? 'is invalid'}.`);
  }
  return { ...cidr, subnetPrefix, size: 2 ** (subnetPrefix - cidr.prefix) };
}

/** The subnet at `slot` of the pool, with its range and the egress proxy's address. */
export function sandboxSubnet(pool: AddressPool, slot: number): SandboxSubnet {
  const size = blockSize(pool.subnetPrefix);
  const base = pool.base + slot * size;
  return {
    subnet: `${formatAddress(base)}/${pool.subnetPrefix}`,
    ipRange: `${formatAddress(base)}/${pool.subnetPrefix + 1}`,
    gateway: formatAddress(base + 1),
    // The last address is the broadcast address; the one before it is the last usable.
    egressAddress: formatAddress(base + size - 2),
  };
}

/** The addresses of a network the controller made, from the subnet it was created with. */
export function subnetAddresses(subnet: string): SandboxSubnet | undefined {
  const cidr = parseCidr(subnet);
  if (typeof cidr === 'string' || cidr.prefix < SUBNET_PREFIX_MIN || cidr.prefix > SUBNET_PREFIX_MAX) return undefined;
  return sandboxSubnet({ ...cidr, subnetPrefix: cidr.prefix, size: 1 }, 0);
}

/**
 * The slots a network of this name tries, in order: every slot of the pool once. The first and
 * the stride come from a hash of the name, so two names rarely follow each other's sequence, and
 * the stride is odd, so with a power-of-two pool it visits every slot before repeating.
 */
export function* subnetSlots(pool: AddressPool, name: string): Generator<number> {
  const digest = createHash('sha256').update(name).digest();
  const start = digest.readUInt32BE(0) % pool.size;
  const stride = (digest.readUInt32BE(4) % pool.size) | 1;
  for (let k = 0; k < pool.size; k += 1) yield (start + k * stride) % pool.size;
}
