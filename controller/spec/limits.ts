/**
 * Turns a spec's resource limits into Docker values. A limit the engine cannot enforce is
 * refused (`limit_not_expressible`) rather than dropped: a sandbox that silently runs without
 * a cap the caller asked for is worse than no sandbox. Types and signs are the schema's job
 * (sandbox-spec.ts); what is left here is what Docker and the deployment can express.
 */
import type { MaxLimits } from './config.js';
import { SandboxError } from './errors.js';
import type { CheckedSandboxSpec } from './sandbox-spec.js';

const MIB = 1024 * 1024;
/** Docker refuses memory limits below 6 MiB. */
const MIN_MEMORY_MB = 6;
/** Docker's NanoCpus granularity is 0.01 CPU. */
const MIN_CPU = 0.01;

const DEFAULT_CPU = 1;
const DEFAULT_MEMORY_MB = 1024;
export const PIDS_LIMIT = 1024;

export interface DockerLimits {
  readonly nanoCpus: number;
  readonly memoryBytes: number;
  /** /tmp tmpfs size: min(memory / 2, disk). */
  readonly tmpBytes: number;
  /** Volume driver option, only when a driver that can enforce it is configured. */
  readonly volumeSize: string | undefined;
}

/** Refuses a value above the deployment's ceiling, naming both and the config key. */
function atMost(value: number | undefined, ceiling: number, key: 'cpu' | 'memoryMb' | 'diskMb'): void {
  if (value !== undefined && value > ceiling) {
    throw new SandboxError('invalid_spec', `The sandbox spec was refused: spec.limits.${key} ${value} is above this deployment's maximum of ${ceiling} (extensionConfig."sandbox-docker".maxLimits.${key}).`);
  }
}

export function dockerLimits(limits: CheckedSandboxSpec['limits'], volumeDriver: string | undefined, ceilings: MaxLimits): DockerLimits {
  atMost(limits.cpu, ceilings.cpu, 'cpu');
  atMost(limits.memoryMb, ceilings.memoryMb, 'memoryMb');
  atMost(limits.diskMb, ceilings.diskMb, 'diskMb');
  // A default never exceeds the deployment's ceiling.
  const cpu = limits.cpu ?? Math.min(DEFAULT_CPU, ceilings.cpu);
  if (cpu < MIN_CPU) {
    throw new SandboxError('limit_not_expressible', `limits.cpu ${cpu} is below Docker's smallest CPU quota (${MIN_CPU}).`);
  }
  const memoryMb = limits.memoryMb ?? Math.min(DEFAULT_MEMORY_MB, ceilings.memoryMb);
  if (memoryMb < MIN_MEMORY_MB) {
    throw new SandboxError('limit_not_expressible', `limits.memoryMb ${memoryMb} is below Docker's minimum of ${MIN_MEMORY_MB} MiB.`);
  }
  const diskMb = limits.diskMb;
  if (diskMb !== undefined && volumeDriver === undefined) {
    throw new SandboxError(
      'limit_not_expressible',
      `limits.diskMb (${diskMb}) cannot be enforced: the local volume driver has no size limit. Set extensionConfig."sandbox-docker".volumeDriver to a driver that honours size=, or omit diskMb.`,
    );
  }
  const memoryBytes = memoryMb * MIB;
  const halfMemory = Math.floor(memoryBytes / 2);
  return {
    nanoCpus: Math.round(cpu * 1e9),
    memoryBytes,
    tmpBytes: diskMb === undefined ? halfMemory : Math.min(halfMemory, diskMb * MIB),
    volumeSize: diskMb === undefined ? undefined : `${diskMb}M`,
  };
}
