/** The sandbox controller: a `sandbox@1` provider on a Docker engine. */
export { createDockerSandbox } from './provider.js';
export type { SandboxTestOptions, SandboxRuntimeOptions, DockerSandboxProvider } from './provider.js';
export type { EgressUsage } from './sandbox/index.js';
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
} from './spec/index.js';
export { SandboxError, isSandboxError, sandboxErrorCodes } from './spec/index.js';
export { SANDBOX_TAG_RE } from './spec/index.js';
export type { SandboxErrorCode } from './spec/index.js';
export { deploymentConfigSchema, parseDeploymentConfig } from './spec/index.js';
export type { DeploymentConfig, DeploymentConfigInput } from './spec/index.js';
