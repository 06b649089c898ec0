/**
 * Listing by label. Containers and volumes are listed for the operator CLI (the socket proxy
 * refuses those calls by design, 403, so they work only against the engine itself), but for the
 * running containers that hold one persistent workspace, which the controller asks. Networks are
 * listed by the controller too, filtered on exactly one label (the sandbox's name, or the shared
 * network's), which is the one listing the socket proxy admits: it finds every network of a name
 * when Docker's CheckDuplicate lost a race and made several. Always filtered by labels (all must
 * match).
 */
import { SandboxError } from '../spec/index.js';
import type { EngineCaller } from './engine-call.js';
import type { ContainerNetwork, ContainerSummary, NetworkView } from './sandbox-engine.js';

export type { ContainerSummary } from './sandbox-engine.js';

/** A listed network or volume (a volume's id is its name). */
export interface ResourceSummary {
  readonly id: string;
  readonly name: string;
  readonly createdMs: number;
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * `all`: stopped containers too (the operator CLI's listings). Only the running ones, filtered on
 * one workspace label, is the listing the socket proxy admits (who holds a persistent workspace).
 */
export async function listContainers(engine: EngineCaller, labels: readonly string[], all = true): Promise<ContainerSummary[]> {
  const rows = await engine.call<Array<{ Id: string; Names?: string[]; Image?: string; State?: string; Status?: string; Created?: number; Labels?: Record<string, string> | null; NetworkSettings?: RawNetworkSettings }>>(
    'listing of containers', 'GET', '/containers/json', { query: all ? { all: true, filters: labelFilter(labels) } : { filters: labelFilter(labels) } },
  );
  return rows.map((c) => ({
    id: c.Id,
    name: (c.Names?.[0] ?? '').replace(/^\//, ''),
    image: c.Image ?? '',
    state: c.State ?? 'unknown',
    status: c.Status ?? '',
    createdMs: (c.Created ?? 0) * 1000,
    labels: c.Labels ?? {},
    networks: containerNetworks(c.NetworkSettings),
  }));
}

/**
 * Every container on a network, stopped ones included (operator CLI only): a network's inspect
 * lists only running endpoints, and Docker removes a network that stopped containers still name,
 * which then cannot start. By id and by name: a container that never started knows its network
 * by name only.
 */
export async function containersOnNetwork(engine: EngineCaller, network: { readonly id: string; readonly name: string }): Promise<string[]> {
  const rows = await engine.call<Array<{ Names?: string[] }>>('listing of containers', 'GET', '/containers/json', {
    query: { all: true, filters: JSON.stringify({ network: [network.id, network.name] }) },
  });
  return rows.map((c) => (c.Names?.[0] ?? '').replace(/^\//, ''));
}

/** NetworkSettings of a container, as inspect and a listing give it. */
export interface RawNetworkSettings {
  Networks?: Record<string, { NetworkID?: string; IPAddress?: string } | null> | null;
}

export function containerNetworks(settings: RawNetworkSettings | undefined): ContainerNetwork[] {
  return Object.entries(settings?.Networks ?? {}).map(([name, n]) => ({ name, id: n?.NetworkID ?? '', ipv4: n?.IPAddress ?? '' }));
}

/** A network as Docker's inspect and listing give it. */
export interface RawNetwork {
  Id?: string;
  Name?: string;
  Created?: string;
  Internal?: boolean;
  Options?: Record<string, string> | null;
  Labels?: Record<string, string> | null;
  IPAM?: { Config?: Array<{ Gateway?: string; Subnet?: string }> | null };
  Containers?: Record<string, { Name?: string; IPv4Address?: string }> | null;
}

export function networkView(data: RawNetwork): NetworkView {
  const config = data.IPAM?.Config ?? [];
  return {
    id: data.Id ?? '',
    name: data.Name ?? '',
    createdMs: Date.parse(data.Created ?? '') || 0,
    internal: data.Internal === true,
    options: data.Options ?? {},
    labels: data.Labels ?? {},
    subnets: config.map((c) => c.Subnet ?? '').filter((s) => s !== ''),
    gateways: config.map((c) => c.Gateway ?? '').filter((g) => g !== ''),
    members: Object.values(data.Containers ?? {}).map((c) => ({ name: c.Name ?? '', ipv4: (c.IPv4Address ?? '').split('/')[0] ?? '' })),
  };
}

export async function listNetworks(engine: EngineCaller, labels: readonly string[]): Promise<NetworkView[]> {
  const rows = await engine.call<RawNetwork[]>('listing of networks', 'GET', '/networks', { query: { filters: labelFilter(labels) } });
  return rows.map(networkView);
}

export async function listVolumes(engine: EngineCaller, labels: readonly string[]): Promise<ResourceSummary[]> {
  const data = await engine.call<{ Volumes?: Array<{ Name: string; CreatedAt?: string; Labels?: Record<string, string> | null }> | null }>(
    'listing of volumes', 'GET', '/volumes', { query: { filters: labelFilter(labels) } },
  );
  return (data.Volumes ?? []).map((v) => ({ id: v.Name, name: v.Name, createdMs: Date.parse(v.CreatedAt ?? '') || 0, labels: v.Labels ?? {} }));
}

function labelFilter(labels: readonly string[]): string {
  if (labels.length === 0) throw new SandboxError('invalid_spec', 'A listing needs at least one label filter.');
  return JSON.stringify({ label: labels });
}
