/**
 * The engine calls a sandbox needs, each by name and each admitted by the socket proxy: what the
 * provider, create and recovery, commands and file operations depend on. DockerEngine is the one
 * real implementation; the tests also drive the same code with an in-memory engine
 * (test/support/fake-engine.ts) that answers as Docker 20.10 does. Failures are SandboxErrors, and
 * an engine's HTTP answer is read with `engineStatus` (404 missing, 409 conflict, ...).
 */
import type { ExecRequest, ExecRun } from './engine-exec.js';

/** A container as inspect shows it. */
export interface ContainerView {
  readonly status: string;
  /** True for a paused container too (Docker's State.Running). */
  readonly running: boolean;
  readonly paused: boolean;
  readonly labels: Readonly<Record<string, string>>;
  readonly image: string;
  readonly user: string;
  readonly cmd: readonly string[];
  readonly workingDir: string;
  readonly env: readonly string[];
  /** HostConfig as Docker stored it (what the controller sent, plus defaults). */
  readonly hostConfig: Readonly<Record<string, unknown>>;
}

export interface SandboxEngine {
  /** undefined when there is no container of that name. */
  inspectContainer(name: string): Promise<ContainerView | undefined>;
  createContainer(name: string, body: unknown): Promise<void>;
  startContainer(name: string): Promise<void>;
  /** A missing or stopped container is fine. */
  stopContainer(name: string, graceSeconds: number): Promise<void>;
  restartContainer(name: string): Promise<void>;
  unpauseContainer(name: string): Promise<void>;
  /** Force-removes a container and its anonymous volumes; a missing one is fine. */
  removeContainer(name: string): Promise<void>;
  volumeExists(name: string): Promise<boolean>;
  createVolume(body: { Name: string }): Promise<void>;
  /** Unforced: the engine refuses (409) while a container uses the volume; a missing one is fine. */
  removeVolume(name: string): Promise<void>;
  networkExists(name: string): Promise<boolean>;
  createNetwork(body: { Name: string }): Promise<void>;
  /** A missing one is fine. */
  removeNetwork(name: string): Promise<void>;
  connectNetwork(network: string, container: string): Promise<void>;
  pullImage(image: string): Promise<void>;
  /** Creates and starts an exec: output as it arrives, stdin streamed, then the exit code. */
  startExec(container: string, request: ExecRequest): Promise<ExecRun>;
}
