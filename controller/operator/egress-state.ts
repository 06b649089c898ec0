/**
 * What `ls`, `inspect` and `doctor` say of a sandbox's egress proxy. A proxy that runs but is not
 * on the sandbox's network looks healthy by its state alone, yet every request from the sandbox
 * times out (a controller killed between the proxy's start and its connect, or `docker network
 * disconnect`): that is its own state, `detached`, which the next command or resume repairs. Pure.
 */
import { meaningOfLabel, LABEL_EGRESS } from '../spec/index.js';
import type { ContainerNetwork } from '../docker/index.js';

/** The one state that means "running, but the sandbox cannot reach it". */
export const EGRESS_DETACHED = 'detached';
/**
 * Running, but the sandbox has a leg on another network as well (docker network connect): its
 * traffic need not pass the proxy. The next command or resume takes that leg off.
 */
export const EGRESS_EXPOSED = 'exposed';

interface Container {
  readonly state: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly networks: readonly ContainerNetwork[];
}

/**
 * `none` (its tier has no proxy), `missing`, the proxy container's state (`running`, `exited`,
 * `paused`, `restarting`, ...), `detached`: running, off the network the running sandbox is on, or
 * `exposed`: the running sandbox is on a network besides its own.
 */
export function egressState(sandbox: Container, egress: Omit<Container, 'labels'> | undefined): string {
  if (!meaningOfLabel(sandbox.labels[LABEL_EGRESS]).egressProxy) return 'none';
  if (egress === undefined) return 'missing';
  if (egress.state !== 'running') return egress.state;
  if (sandbox.networks.filter((n) => n.id !== '').length > 1) return EGRESS_EXPOSED;
  const network = sandbox.networks.find((n) => n.id !== '');
  if (network === undefined) return egress.state;
  return egress.networks.some((n) => n.id === network.id) ? 'running' : EGRESS_DETACHED;
}
