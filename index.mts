/**
 * Plugin entry (compiled to dist/index.mjs, named by .capybara-plugin/plugin.json). The host
 * calls the default export with the validated deployment config and gets the `sandbox@1`
 * provider back.
 */
import { createDockerSandbox, type DeploymentConfigInput, type SandboxProvider } from './controller/index.js';

export default function activate(config: DeploymentConfigInput): { 'sandbox@1': SandboxProvider } {
  return { 'sandbox@1': createDockerSandbox(config) };
}

// Everything the controller exports: createDockerSandbox, the sandbox@1 contract types, errors.
export * from './controller/index.js';
