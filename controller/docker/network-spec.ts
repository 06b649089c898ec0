/**
 * Network create and connect bodies. The shared network carries egress proxies (and open-tier
 * sandboxes) with inter-container traffic off; each sandbox's own network is internal (no route
 * out), its bridge gets no host address, so nothing on it can reach services listening on the
 * host, and it takes a small subnet of the deployment's address pool (address-pool.ts) instead of
 * a /16 or /20 of Docker's default pools, which hold about 30 networks per engine.
 */
import { LABEL_SANDBOX, LABEL_SHARED_NETWORK, LABEL_SUBNET, type SandboxSubnet } from '../spec/index.js';
import type { NetworkView } from './sandbox-engine.js';

const ENABLE_ICC = 'com.docker.network.bridge.enable_icc';
const INHIBIT_IPV4 = 'com.docker.network.bridge.inhibit_ipv4';

export interface NetworkCreateBody {
  Name: string;
  Driver: 'bridge';
  CheckDuplicate: true;
  Internal?: true;
  Options: Record<string, string>;
  Labels: Record<string, string>;
  IPAM?: { Config: [{ Subnet: string; IPRange: string; Gateway: string }] };
}

export interface NetworkConnectBody {
  Container: string;
  EndpointConfig?: { IPAMConfig: { IPv4Address: string }; Aliases?: [string] };
}

export interface NetworkDisconnectBody {
  Container: string;
  Force: true;
}

export function sharedNetworkBody(name: string, extraLabels: Readonly<Record<string, string>>): NetworkCreateBody {
  return {
    Name: name,
    Driver: 'bridge',
    CheckDuplicate: true,
    // Sandboxes and egress proxies of different conversations must not talk to each other.
    Options: { [ENABLE_ICC]: 'false' },
    // The label lets a controller find every network of this name it made: CheckDuplicate races
    // across processes, and the duplicates must be found to be removed.
    Labels: { ...extraLabels, [LABEL_SANDBOX]: '1', [LABEL_SHARED_NETWORK]: name },
  };
}

export function internalNetworkBody(name: string, labels: Readonly<Record<string, string>>, addresses: SandboxSubnet): NetworkCreateBody {
  return {
    Name: name,
    Driver: 'bridge',
    CheckDuplicate: true,
    // No default route and no NAT: the only way out is the egress proxy on the same network.
    Internal: true,
    // Without a host-side address on the bridge, a sandbox cannot reach host services bound to
    // 0.0.0.0 through the gateway address (Internal alone still allows that), and the host has no
    // route into the subnet.
    Options: { [INHIBIT_IPV4]: 'true' },
    Labels: { ...labels, [LABEL_SUBNET]: addresses.subnet },
    // Dynamic addresses (the sandbox) from the lower half only: the egress proxy's fixed address
    // above it can never be taken first. The gateway is the first address, as dockerd would pick
    // it, but named: dockerd lists a gateway in inspect only when the create named it.
    IPAM: { Config: [{ Subnet: addresses.subnet, IPRange: addresses.ipRange, Gateway: addresses.gateway }] },
  };
}

/**
 * The egress proxy's leg on a sandbox network (API 1.41 takes one endpoint per create): the
 * container, and on a network from the address pool its fixed address. `alias`: the name the
 * sandbox dials its proxy by (`cap-<id>-egress`), for a shard of the shared egress, which has a
 * name of its own; only on that network. No driver option.
 */
export function networkConnectBody(container: string, ipv4: string | undefined, alias?: string): NetworkConnectBody {
  if (ipv4 === undefined) return { Container: container };
  return { Container: container, EndpointConfig: { IPAMConfig: { IPv4Address: ipv4 }, ...(alias === undefined ? {} : { Aliases: [alias] as [string] }) } };
}

/**
 * A shard's leg on a sandbox network, taken away before the network is removed (dockerd refuses to
 * remove a network with an endpoint on it). Forced: a stopped shard's endpoint goes too.
 */
export function networkDisconnectBody(container: string): NetworkDisconnectBody {
  return { Container: container, Force: true };
}

/**
 * Why an existing network cannot serve as the shared network, or undefined. Made by someone else,
 * or deleted and made again, with inter-container traffic on, it lets one tenant's container reach
 * another's ports; the socket proxy refuses to create one, and the controller refuses to use one.
 */
export function sharedNetworkProblem(view: NetworkView): string | undefined {
  if (view.options[ENABLE_ICC] !== 'false') return `its option ${ENABLE_ICC} is ${JSON.stringify(view.options[ENABLE_ICC] ?? 'unset (true)')}, not "false": containers of different sandboxes on it could reach each other`;
  if (view.internal) return 'it is internal: the egress proxies on it would have no way out';
  return undefined;
}

/** Why an existing network cannot serve as a sandbox's own, or undefined (internal, no host address). */
export function sandboxNetworkProblem(view: NetworkView): string | undefined {
  if (!view.internal) return 'it is not internal: a sandbox on it would have a route out past its egress proxy';
  if (view.options[INHIBIT_IPV4] !== 'true') return `its option ${INHIBIT_IPV4} is not "true": its bridge has a host address, through which a sandbox reaches services on the host`;
  return undefined;
}
