/**
 * `create` and the create-if-missing half of `run`, through the provider like any host. `create`
 * never replaces a sandbox (the provider's own create would, silently, taking its ephemeral
 * workspace with it); `run` reuses one only when every option typed agrees with what it was
 * created with, so a command never runs with more access than the command line asked for.
 */
import { type SandboxHandle, type SandboxProvider, SandboxError, checkSandboxSpec, isSandboxError } from '../spec/index.js';
import type { DockerEngine } from '../docker/index.js';
import { inspectSandbox, type SandboxDetail } from './sandbox-detail.js';
import { describeSpec, optionMismatches, sandboxSpec, type SandboxOptions } from './sandbox-options.js';

export interface SandboxCommandDeps {
  readonly provider: SandboxProvider;
  /** Per-name engine calls only, so the socket proxy serves them. */
  readonly engine: DockerEngine;
  /** The deployment's shared network: the shards of its shared egress are named after it. */
  readonly sharedNetwork: string;
  readonly progress: (line: string) => void;
}

export interface Ensured {
  readonly handle: SandboxHandle;
  readonly created: boolean;
  readonly ms: number;
}

async function existing(deps: SandboxCommandDeps, name: string): Promise<SandboxDetail | undefined> {
  try {
    return await inspectSandbox(deps.engine, name, deps.sharedNetwork);
  } catch (err) {
    if (isSandboxError(err, 'not_found')) return undefined;
    throw err;
  }
}

async function createFresh(deps: SandboxCommandDeps, name: string, options: SandboxOptions): Promise<Ensured> {
  const spec = sandboxSpec(name, options);
  const started = Date.now();
  deps.progress(`creating ${name}: ${describeSpec(spec)}`);
  const handle = await deps.provider.create(spec);
  const ms = Date.now() - started;
  deps.progress(`${name} is ready (${(ms / 1000).toFixed(1)} s)`);
  return { handle, created: true, ms };
}

export async function createSandbox(deps: SandboxCommandDeps, name: string, options: SandboxOptions): Promise<Ensured> {
  // The spec is checked before anything is said or asked of the engine.
  checkSandboxSpec(sandboxSpec(name, options));
  const found = await existing(deps, name);
  if (found !== undefined) {
    throw new SandboxError('invalid_spec', `${name} already exists (${found.state}, egress ${found.tier}); use run to reuse it, or destroy it first (capybara-sandbox destroy ${name}).`);
  }
  return createFresh(deps, name, options);
}

export async function ensureSandbox(deps: SandboxCommandDeps, name: string, options: SandboxOptions): Promise<Ensured> {
  checkSandboxSpec(sandboxSpec(name, options));
  const found = await existing(deps, name);
  if (found === undefined) return createFresh(deps, name, options);
  const mismatches = optionMismatches(options, found);
  if (mismatches.length > 0) {
    throw new SandboxError('invalid_spec', `${name} exists, but its ${mismatches.join('; ')}. Destroy it to create it anew (capybara-sandbox destroy ${name}), or leave those options out to use it as it is.`);
  }
  return { handle: { id: name }, created: false, ms: 0 };
}
