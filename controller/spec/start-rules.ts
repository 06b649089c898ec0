/**
 * The deployment's rules that hold at every start of a sandbox, not only at its create: a sandbox
 * made before the operator tightened the config (or by another deployment on the same engine) is
 * not started again under rules it breaks. Resume and the auto-start before a command both ask
 * here first; the sandbox stays stopped, and can still be destroyed. Pure: it reads what the
 * engine stored for the container.
 *
 * What is checked is what create checks and a stopped container still carries: its egress tier
 * (open egress needs allowOpenEgress), its image (allowedImages), its CPU and memory caps
 * (maxLimits), and its runtime: where the deployment now runs sandboxes under gVisor (`runsc`), a
 * sandbox made under runc is not started again on the host kernel (a resume or a command
 * brought it back under runc, and a rebuild copied runc). A running sandbox is not stopped by a
 * config change; it meets the rules at its next start.
 */
import type { DeploymentConfig } from './config.js';
import { SandboxError } from './errors.js';
import { meaningOfLabel } from './tiers.js';

const MIB = 1024 * 1024;

/** What the engine stored for a sandbox container that start-rules reads. */
export interface StoredSandbox {
  /** The image as it was named at create (Config.Image). */
  readonly image: string;
  /** Its egress tier label. */
  readonly tier: string | undefined;
  /** HostConfig as Docker stored it. */
  readonly hostConfig: Readonly<Record<string, unknown>>;
}

const positive = (value: unknown): number => (typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0);

/** Why sandbox `name` may not be started again under `config`, or undefined when it may. */
export function startRefusal(name: string, stored: StoredSandbox, config: Pick<DeploymentConfig, 'allowOpenEgress' | 'allowedImages' | 'maxLimits' | 'runtime'>): SandboxError | undefined {
  const destroy = `Destroy it (capybara-sandbox destroy ${name}) and create it again`;
  if (meaningOfLabel(stored.tier).needsAllowOpenEgress && !config.allowOpenEgress) {
    return new SandboxError(
      'open_egress_disabled',
      `Sandbox ${name} has open egress, which this deployment does not allow: it is not started again. ${destroy} with another egress tier, or set extensionConfig."sandbox-docker".allowOpenEgress in a trusted environment.`,
    );
  }
  // runc is what Docker runs a container without a runtime of its own under.
  const runtime = typeof stored.hostConfig.Runtime === 'string' && stored.hostConfig.Runtime !== '' ? stored.hostConfig.Runtime : 'runc';
  if (config.runtime === 'runsc' && runtime !== 'runsc') {
    return new SandboxError(
      'invalid_spec',
      `Sandbox ${name} was created under the runtime ${JSON.stringify(runtime)}, and this deployment runs sandboxes under gVisor (runtime "runsc"): it is not started again on the host's kernel. ${destroy} (it is made under runsc).`,
    );
  }
  const { allowedImages, maxLimits } = config;
  if (allowedImages !== undefined && !allowedImages.includes(stored.image)) {
    return new SandboxError(
      'invalid_spec',
      `Sandbox ${name} runs the image ${JSON.stringify(stored.image)}, which is not one of the deployment's allowedImages now: it is not started again. ${destroy} on an allowed image, or ask the operator to add it to extensionConfig."sandbox-docker".allowedImages.`,
    );
  }
  // A cap of 0 is none at all, which is over any ceiling.
  const memoryMb = positive(stored.hostConfig.Memory) / MIB;
  if (memoryMb === 0 || memoryMb > maxLimits.memoryMb) {
    return new SandboxError(
      'invalid_spec',
      `Sandbox ${name} was created with ${memoryMb === 0 ? 'no memory limit' : `a memory limit of ${memoryMb} MiB`}, above this deployment's maximum of ${maxLimits.memoryMb} (extensionConfig."sandbox-docker".maxLimits.memoryMb): it is not started again. ${destroy} with a lower limits.memoryMb.`,
    );
  }
  const cpu = positive(stored.hostConfig.NanoCpus) / 1e9;
  if (cpu === 0 || cpu > maxLimits.cpu) {
    return new SandboxError(
      'invalid_spec',
      `Sandbox ${name} was created with ${cpu === 0 ? 'no CPU limit' : `a CPU limit of ${cpu}`}, above this deployment's maximum of ${maxLimits.cpu} (extensionConfig."sandbox-docker".maxLimits.cpu): it is not started again. ${destroy} with a lower limits.cpu.`,
    );
  }
  return undefined;
}
