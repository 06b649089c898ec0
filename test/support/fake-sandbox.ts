/**
 * The real provider (createDockerSandbox) on the in-memory engine (fake-engine.ts): the
 * controller's own create, recovery and command code, with every engine answer Docker's, in
 * milliseconds. For the branches a real engine reaches only by chance or by minutes of set-up.
 */
import pino from 'pino';
import { createDockerSandbox, type DeploymentConfigInput, type DockerSandboxProvider } from '../../controller/index.js';
import { IMAGES } from '../../common/index.js';
import { FakeEngine } from './fake-engine.js';
import { captureLogs } from './log-capture.js';

export const FAKE_LABELS = { 'dev.capybara.test': 'fake' };

export interface FakeSandbox {
  readonly engine: FakeEngine;
  readonly provider: DockerSandboxProvider;
  /** Every log record the provider wrote (debug and up), parsed. */
  readonly logs: Array<{ level: number; msg: string; [key: string]: unknown }>;
  /** The same provider code with another deployment config, on the same engine. */
  withConfig(config: Partial<DeploymentConfigInput>): DockerSandboxProvider;
}

/**
 * `egressIsolation: sandbox` unless `config` says otherwise: the suites on the in-memory engine
 * were written for a proxy of the sandbox's own (its container, its create and its recovery);
 * those of the shared egress, the deployment default, say `shared`.
 */
export function fakeSandbox(config: Partial<DeploymentConfigInput> = {}): FakeSandbox {
  const engine = new FakeEngine([IMAGES.sandbox, IMAGES.egress]);
  const { logs, sink } = captureLogs<FakeSandbox['logs'][number]>();
  const logger = pino({ level: 'debug' }, sink);
  const withConfig = (more: Partial<DeploymentConfigInput>) =>
    createDockerSandbox({ endpoint: 'unix:///nonexistent/fake-engine.sock', egressIsolation: 'sandbox', ...config, ...more }, { labels: FAKE_LABELS }, { logger, engine });
  return { engine, provider: withConfig({}), logs, withConfig };
}

/** Everything on the fake engine whose name starts with `name` (a sandbox's objects), sorted. */
export function leftOver(s: FakeSandbox, name: string): string[] {
  return [...s.engine.containers.keys(), ...s.engine.networkNames(), ...s.engine.volumes.keys()].filter((n) => n.startsWith(name)).sort();
}

/**
 * Another controller process destroys sandbox `name` while its proxy probe runs: the probe dies
 * with the container (137), and the engine drops `containers` only a moment (600 ms) after the
 * probe has ended, as dockerd can.
 */
export function destroyedDuringProbe(s: FakeSandbox, name: string, containers: readonly string[]): void {
  s.engine.onExec = async (container, request) => {
    if (container === name && request.cmd.join(' ').includes('/dev/tcp/')) {
      setTimeout(() => {
        for (const c of containers) s.engine.containers.delete(c);
      }, 600);
      return { exitCode: 137 };
    }
    return s.engine.defaultExec(container, request);
  };
}
