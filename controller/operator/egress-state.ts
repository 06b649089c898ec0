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

interface Container {
  readonly state: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly networks: readonly ContainerNetwork[];
}

/**
 * `none` (its tier has no proxy), `missing`, the proxy container's state (`running`, `exited`,
 * `paused`, `restarting`, ...), or `detached`: running, off the network the running sandbox is on.
 */
export function egressState(sandbox: Container, egress: Omit<Container, 'labels'> | undefined): string {
  if (!meaningOfLabel(sandbox.labels[LABEL_EGRESS]).egressProxy) return 'none';
  if (egress === undefined) return 'missing';
  if (egress.state !== 'running') return egress.state;
  const network = sandbox.networks.find((n) => n.id !== '');
  if (network === undefined) return egress.state;
  return egress.networks.some((n) => n.id === network.id) ? 'running' : EGRESS_DETACHED;
}
