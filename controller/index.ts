/** The sandbox controller: a `sandbox@1` provider on a Docker engine. */
export { createDockerSandbox } from './provider.js';
export type { SandboxTestOptions, SandboxRuntimeOptions, DockerSandboxProvider } from './provider.js';
export type { EgressUsage } from './egress-usage.js';
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
} from './contract.js';
export { SandboxError, isSandboxError, sandboxErrorCodes } from './errors.js';
export { SANDBOX_TAG_RE } from './names.js';
export type { SandboxErrorCode } from './errors.js';
export { deploymentConfigSchema, parseDeploymentConfig } from './config.js';
export type { DeploymentConfig, DeploymentConfigInput } from './config.js';
