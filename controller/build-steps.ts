/**
 * The steps that both a create (lifecycle.ts) and a recovery (recovery.ts) run to bring parts
 * of a sandbox up: the shared network, a container create that pulls a missing image once, and
 * the per-sandbox egress proxy (created, connected to the shared network, started, and waited
 * for from inside the sandbox so the first command can use it).
 */
import type { Logger } from 'pino';
import { EGRESS_PROXY_PORT } from '../common/index.js';
import type { DeploymentConfig } from './config.js';
import { egressContainerBody, type EgressPlan } from './container-spec.js';
import { engineStatus, type DockerEngine } from './engine.js';
import { SandboxError } from './errors.js';
import { SANDBOX_USER } from './exec-script.js';
import type { SandboxNames } from './names.js';
import { sharedNetworkBody } from './network-spec.js';

const EGRESS_READY_TIMEOUT_MS = 15_000;

export interface BuildDeps {
  readonly engine: DockerEngine;
  readonly config: DeploymentConfig;
  readonly extraLabels: Readonly<Record<string, string>>;
  readonly egressTestHosts: Readonly<Record<string, string>> | undefined;
  readonly logger: Logger;
}

/** A create that lost a race with a concurrent one (409) is as good as done. */
export function ignoreConflict(err: unknown): void {
  if (engineStatus(err) !== 409) throw err;
}

export async function ensureSharedNetwork(deps: BuildDeps): Promise<void> {
  const { engine, config } = deps;
  if (await engine.networkExists(config.network)) return;
  await engine.createNetwork(sharedNetworkBody(config.network, deps.extraLabels)).catch(ignoreConflict);
}

export async function createContainerPullingOnce(deps: BuildDeps, name: string, image: string, body: unknown): Promise<void> {
  const { engine } = deps;
  try {
    await engine.createContainer(name, body);
  } catch (err) {
    // 404 also means a missing network; only a missing image is worth a pull.
    if (engineStatus(err) !== 404 || !/no such image/i.test((err as Error).message)) throw err;
    deps.logger.info({ image }, 'image not on the engine, pulling it once');
    try {
      await engine.pullImage(image);
    } catch (pullErr) {
      throw new SandboxError('image_unavailable', `Image ${image} is not on the engine and could not be pulled; build or pre-pull it on every Docker node.`, { cause: pullErr });
    }
    await engine.createContainer(name, body);
  }
}

/** Creates the egress proxy on the sandbox's internal network, adds its shared-network leg, starts it. */
export async function createEgress(deps: BuildDeps, plan: EgressPlan): Promise<void> {
  const body = egressContainerBody(plan, deps.egressTestHosts);
  await createContainerPullingOnce(deps, plan.names.egress, plan.egressProxyImage, body);
  await deps.engine.connectNetwork(plan.sharedNetwork, plan.names.egress);
  await deps.engine.startContainer(plan.names.egress);
}

/** The proxy listens within a second of start; wait so the first command can use it. */
export async function waitForEgress(deps: BuildDeps, names: SandboxNames): Promise<void> {
  const seconds = Math.ceil(EGRESS_READY_TIMEOUT_MS / 1000);
  // One attempt can block on a name lookup (a proxy that exited leaves its name unresolvable),
  // so `timeout` holds the whole loop to the deadline, not just the attempt count.
  const probe = `while ! (exec 3<>/dev/tcp/${names.egress}/${EGRESS_PROXY_PORT}) 2>/dev/null; do sleep 0.05; done`;
  const run = await deps.engine.startExec(names.container, {
    cmd: ['timeout', '-s', 'KILL', String(seconds), 'bash', '-c', probe],
    user: SANDBOX_USER,
    onOutput: () => undefined,
  });
  const code = await run.finished;
  if (code !== 0) {
    throw new SandboxError('egress_unavailable', `The egress proxy ${names.egress} did not accept connections within ${seconds} s; check the image ${deps.config.egressProxyImage} and its logs.`);
  }
}
