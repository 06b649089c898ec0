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
  readonly id: string;
  readonly status: string;
  /** True for a paused container too (Docker's State.Running). */
  readonly running: boolean;
  readonly paused: boolean;
  /** When it last started, by the engine's clock (absent before a first start). */
  readonly startedMs?: number;
  /** When it was created, by the engine's clock. */
  readonly createdMs?: number;
  readonly labels: Readonly<Record<string, string>>;
  readonly image: string;
  readonly user: string;
  readonly cmd: readonly string[];
  readonly workingDir: string;
  readonly env: readonly string[];
  /** HostConfig as Docker stored it (what the controller sent, plus defaults). */
  readonly hostConfig: Readonly<Record<string, unknown>>;
  /** The networks it is attached to; `id` and `ipv4` are empty until it has started on one. */
  readonly networks: readonly ContainerNetwork[];
}

/** A container as a listing shows it. */
export interface ContainerSummary {
  readonly id: string;
  readonly name: string;
  readonly image: string;
  readonly state: string;
  readonly status: string;
  readonly createdMs: number;
  readonly labels: Readonly<Record<string, string>>;
  readonly networks: readonly ContainerNetwork[];
}

export interface ContainerNetwork {
  readonly name: string;
  readonly id: string;
  readonly ipv4: string;
}

/** A network as inspect or a listing shows it (a listing leaves `members` empty). */
export interface NetworkView {
  readonly id: string;
  readonly name: string;
  readonly createdMs: number;
  readonly internal: boolean;
  readonly options: Readonly<Record<string, string>>;
  readonly labels: Readonly<Record<string, string>>;
  readonly subnets: readonly string[];
  readonly gateways: readonly string[];
  readonly members: ReadonlyArray<{ readonly name: string; readonly ipv4: string }>;
}

/** A volume as inspect shows it. */
export interface VolumeView {
  /** `local`, or a plugin's name. */
  readonly driver: string;
  /** The driver options it was created with (`size` for a volume plugin that caps it). */
  readonly options: Readonly<Record<string, string>>;
}

export interface SandboxEngine {
  /** undefined when there is no container of that name. */
  inspectContainer(name: string): Promise<ContainerView | undefined>;
  /** Returns the new container's id. */
  createContainer(name: string, body: unknown): Promise<string>;
  /**
   * Makes the root of the container's workspace volume the sandbox user's (workspace-owner.ts): a
   * volume mounted with NoCopy starts as root's. Before the first start.
   */
  giveWorkspaceToSandboxUser(name: string): Promise<void>;
  /** Running (and paused) containers carrying all these labels (the proxy admits one workspace label). */
  listRunningContainers(labels: readonly string[]): Promise<ContainerSummary[]>;
  startContainer(name: string): Promise<void>;
  /** A missing or stopped container is fine. */
  stopContainer(name: string, graceSeconds: number): Promise<void>;
  restartContainer(name: string): Promise<void>;
  unpauseContainer(name: string): Promise<void>;
  /** Force-removes a container and its anonymous volumes; a missing one is fine. */
  removeContainer(name: string): Promise<void>;
  /** Volume `name` as inspect shows it; undefined when there is no such volume. */
  inspectVolume(name: string): Promise<VolumeView | undefined>;
  createVolume(body: { Name: string }): Promise<void>;
  /** Unforced: the engine refuses (409) while a container uses the volume; a missing one is fine. */
  removeVolume(name: string): Promise<void>;
  /**
   * Puts a registration archive (common/tenant-archive.ts) into an egress container's
   * registrations directory: a volume, so a created or stopped container takes it too.
   */
  putRegistration(container: string, archive: Buffer): Promise<void>;
  /**
   * By id, or by name (the shared network; a name several networks share is an error, 400):
   * undefined when there is none.
   */
  inspectNetwork(idOrName: string): Promise<NetworkView | undefined>;
  /** Every network carrying all these `key=value` labels (the socket proxy admits one exact label). */
  listNetworks(labels: readonly string[]): Promise<NetworkView[]>;
  /** Returns the new network's id. */
  createNetwork(body: { Name: string }): Promise<string>;
  /** By id; a missing one is fine. */
  removeNetwork(idOrName: string): Promise<void>;
  /**
   * Attaches a container; `ipv4` is its fixed address there (a network with a subnet of its own),
   * `alias` a second name it answers to on that network only.
   */
  connectNetwork(network: string, container: string, ipv4?: string, alias?: string): Promise<void>;
  /** Detaches a container (forced: a stopped one too); a missing network or container is fine. */
  disconnectNetwork(network: string, container: string): Promise<void>;
  pullImage(image: string): Promise<void>;
  /** Creates and starts an exec: output as it arrives, stdin streamed, then the exit code. */
  startExec(container: string, request: ExecRequest): Promise<ExecRun>;
}
