/** The sandbox controller: a `sandbox@1` provider on a Docker engine. */
export { createDockerSandbox } from './provider.js';
export type { SandboxTestOptions, SandboxRuntimeOptions, DockerSandboxProvider } from './provider.js';
export type { EgressUsage } from './sandbox/egress-usage.js';
export type {
  SandboxProvider,
  SandboxHandle,
  SandboxSpec,
  SandboxLimits,
  SandboxWorkspace,
  EgressTier,
  ExecOptions,
  ExecResult,
  FileStat,
} from './spec/contract.js';
export { SandboxError, isSandboxError, sandboxErrorCodes } from './spec/errors.js';
export { SANDBOX_TAG_RE } from './spec/names.js';
export type { SandboxErrorCode } from './spec/errors.js';
export { deploymentConfigSchema, parseDeploymentConfig } from './spec/config.js';
export type { DeploymentConfig, DeploymentConfigInput } from './spec/config.js';
