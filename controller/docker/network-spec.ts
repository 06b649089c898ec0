/**
 * Network create bodies. The shared network carries egress proxies (and open-tier sandboxes)
 * with inter-container traffic off; each sandbox's own network is internal (no route out) and
 * its bridge gets no host address, so nothing on it can reach services listening on the host.
 */
import { LABEL_SANDBOX } from '../spec/index.js';

export interface NetworkCreateBody {
  Name: string;
  Driver: 'bridge';
  CheckDuplicate: true;
  Internal?: true;
  Options: Record<string, string>;
  Labels: Record<string, string>;
}

export function sharedNetworkBody(name: string, extraLabels: Readonly<Record<string, string>>): NetworkCreateBody {
  return {
    Name: name,
    Driver: 'bridge',
    CheckDuplicate: true,
    // Sandboxes and egress proxies of different conversations must not talk to each other.
    Options: { 'com.docker.network.bridge.enable_icc': 'false' },
    Labels: { ...extraLabels, [LABEL_SANDBOX]: '1' },
  };
}

export function internalNetworkBody(name: string, labels: Readonly<Record<string, string>>): NetworkCreateBody {
  return {
    Name: name,
    Driver: 'bridge',
    CheckDuplicate: true,
    // No default route and no NAT: the only way out is the egress proxy on the same network.
    Internal: true,
    // Without a host-side address on the bridge, a sandbox cannot reach host services bound to
    // 0.0.0.0 through the gateway address (Internal alone still allows that).
    Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' },
    Labels: { ...labels },
  };
}

/**
 * The egress proxy's second leg (API 1.41 takes one endpoint per create): the container and
 * nothing else, so no address, alias or driver option is chosen on connect.
 */
export function networkConnectBody(container: string): { Container: string } {
  return { Container: container };
}
