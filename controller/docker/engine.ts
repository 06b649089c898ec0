/**
 * The Docker objects the controller uses: containers and volumes by name, networks by id once
 * created (a name can be ambiguous: Docker's CheckDuplicate races across processes), images. Every
 * call goes through engine-call.ts (exact requests, deadlines, error mapping); exec streaming
 * and the operator's listing live in engine-exec.ts and engine-listing.ts and are reached here
 * so that callers hold one engine object. Containers are always addressed by name.
 */
import type { Readable } from 'node:stream';
import { SandboxError } from '../spec/index.js';
import { EngineCaller, type EngineOptions } from './engine-call.js';
import { startExec, type ExecRequest, type ExecRun } from './engine-exec.js';
import { readContainerLogs, type LogRead, type LogRequest } from './engine-logs.js';
import {
  containerNetworks, containersOnNetwork, listContainers, listNetworks, listVolumes, networkView, type ContainerSummary, type RawNetwork, type RawNetworkSettings, type ResourceSummary,
} from './engine-listing.js';
import { networkConnectBody, networkDisconnectBody } from './network-spec.js';
import { imagePathPart, pullReference } from './image-reference.js';
import { WORKSPACE } from './container-spec.js';
import { TENANTS_DIR } from '../../common/index.js';
import { WORKSPACE_OWNER_ARCHIVE } from './workspace-owner.js';
import type { ContainerView, NetworkView, SandboxEngine, VolumeView } from './sandbox-engine.js';

export { EngineStatusError, engineStatus, imageRefusal, isEngineStatusError } from './engine-call.js';
export { finishedWithin } from './engine-exec.js';
export type { ExecRequest, ExecRun } from './engine-exec.js';
export type { LogRead, LogRequest } from './engine-logs.js';
export type { ContainerSummary, ResourceSummary } from './engine-listing.js';
export type { NetworkView } from './sandbox-engine.js';

const PULL_TIMEOUT_MS = 10 * 60_000;

/** The sandbox calls (sandbox-engine.ts) and the operator CLI's own: ping, network inspect, image checks, listing. */
/**
 * A time of Docker's (RFC 3339), such as Created or State.StartedAt, which Docker sets to year 1
 * before a first start: that and garbage are none.
 */
function timeOf(text: string | undefined): number | undefined {
  const ms = text === undefined ? NaN : Date.parse(text);
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

function startedOf(text: string | undefined): { startedMs?: number } {
  const ms = timeOf(text);
  return ms === undefined ? {} : { startedMs: ms };
}

export class DockerEngine implements SandboxEngine {
  private readonly engine: EngineCaller;

  constructor(options: EngineOptions) {
    this.engine = new EngineCaller(options);
  }

  private call<T>(...args: Parameters<EngineCaller['call']>): Promise<T> {
    return this.engine.call<T>(...args);
  }

  private optional<T>(promise: Promise<T>): Promise<T | undefined> {
    return this.engine.optional(promise);
  }

  private get callTimeoutMs(): number {
    return this.engine.callTimeoutMs;
  }

  async ping(): Promise<void> {
    await this.call<unknown>('ping', 'GET', '/_ping');
  }

  async inspectContainer(name: string): Promise<ContainerView | undefined> {
    const data = await this.optional(
      this.call<{
        Id?: string;
        Created?: string;
        State?: { Status?: string; Running?: boolean; Paused?: boolean; StartedAt?: string };
        Config?: { Labels?: Record<string, string> | null; Image?: string; User?: string; Cmd?: string[] | null; WorkingDir?: string; Env?: string[] | null };
        HostConfig?: Record<string, unknown>;
        NetworkSettings?: RawNetworkSettings;
      }>(`inspect of container ${name}`, 'GET', `/containers/${name}/json`),
    );
    if (data === undefined) return undefined;
    const createdMs = timeOf(data.Created);
    return {
      id: data.Id ?? '',
      status: data.State?.Status ?? 'unknown',
      running: data.State?.Running === true,
      paused: data.State?.Paused === true,
      ...startedOf(data.State?.StartedAt),
      ...(createdMs === undefined ? {} : { createdMs }),
      labels: data.Config?.Labels ?? {},
      image: data.Config?.Image ?? '',
      user: data.Config?.User ?? '',
      cmd: data.Config?.Cmd ?? [],
      workingDir: data.Config?.WorkingDir ?? '',
      env: data.Config?.Env ?? [],
      hostConfig: data.HostConfig ?? {},
      networks: containerNetworks(data.NetworkSettings),
    };
  }

  async createContainer(name: string, body: unknown): Promise<string> {
    const created = await this.call<{ Id?: unknown }>(`create of container ${name}`, 'POST', '/containers/create', { query: { name }, body, timeoutMs: this.callTimeoutMs * 2 });
    if (typeof created?.Id !== 'string' || created.Id === '') throw new SandboxError('engine_error', `Docker created container ${name} but did not say its id.`);
    return created.Id;
  }

  async giveWorkspaceToSandboxUser(name: string): Promise<void> {
    await this.call(`hand-over of the workspace of ${name}`, 'PUT', `/containers/${name}/archive`, { query: { path: WORKSPACE }, file: WORKSPACE_OWNER_ARCHIVE });
  }

  async putRegistration(container: string, archive: Buffer): Promise<void> {
    await this.call(`registration in ${container}`, 'PUT', `/containers/${container}/archive`, { query: { path: TENANTS_DIR }, file: archive });
  }

  async startContainer(name: string): Promise<void> {
    await this.call(`start of container ${name}`, 'POST', `/containers/${name}/start`);
  }

  async stopContainer(name: string, graceSeconds: number): Promise<void> {
    await this.optional(this.call(`stop of container ${name}`, 'POST', `/containers/${name}/stop`, {
      query: { t: graceSeconds }, timeoutMs: this.callTimeoutMs + graceSeconds * 1000,
    }));
  }

  async restartContainer(name: string): Promise<void> {
    await this.call(`restart of container ${name}`, 'POST', `/containers/${name}/restart`, { query: { t: 0 } });
  }

  async unpauseContainer(name: string): Promise<void> {
    await this.call(`unpause of container ${name}`, 'POST', `/containers/${name}/unpause`);
  }

  /** Force-removes a container and its anonymous volumes; a missing one is fine. */
  async removeContainer(name: string): Promise<void> {
    await this.optional(this.call(`removal of container ${name}`, 'DELETE', `/containers/${name}`, { query: { force: true, v: true } }));
  }

  async inspectVolume(name: string): Promise<VolumeView | undefined> {
    const data = await this.optional(this.call<{ Driver?: unknown; Options?: unknown }>(`inspect of volume ${name}`, 'GET', `/volumes/${name}`));
    if (data === undefined) return undefined;
    const options: Record<string, string> = {};
    if (typeof data.Options === 'object' && data.Options !== null) {
      for (const [key, value] of Object.entries(data.Options)) if (typeof value === 'string') options[key] = value;
    }
    // Docker names a volume's driver always; an answer without one is read as a plugin's (the careful reading).
    return { driver: typeof data.Driver === 'string' ? data.Driver : '', options };
  }

  async createVolume(body: { Name: string }): Promise<void> {
    await this.call(`create of volume ${body.Name}`, 'POST', '/volumes/create', { body });
  }

  /** Unforced: the engine refuses (409) while a container uses the volume. */
  async removeVolume(name: string): Promise<void> {
    await this.optional(this.call(`removal of volume ${name}`, 'DELETE', `/volumes/${name}`));
  }

  async createNetwork(body: { Name: string }): Promise<string> {
    const created = await this.call<{ Id?: unknown }>(`create of network ${body.Name}`, 'POST', '/networks/create', { body });
    if (typeof created?.Id !== 'string' || created.Id === '') throw new SandboxError('engine_error', `Docker created network ${body.Name} but did not say its id.`);
    return created.Id;
  }

  async removeNetwork(idOrName: string): Promise<void> {
    await this.optional(this.call(`removal of network ${idOrName}`, 'DELETE', `/networks/${idOrName}`));
  }

  async connectNetwork(network: string, container: string, ipv4?: string, alias?: string): Promise<void> {
    await this.call(`connection of ${container} to network ${network}`, 'POST', `/networks/${network}/connect`, { body: networkConnectBody(container, ipv4, alias) });
  }

  async disconnectNetwork(network: string, container: string): Promise<void> {
    await this.optional(this.call(`disconnection of ${container} from network ${network}`, 'POST', `/networks/${network}/disconnect`, { body: networkDisconnectBody(container) }));
  }

  async inspectNetwork(idOrName: string): Promise<NetworkView | undefined> {
    const data = await this.optional(this.call<RawNetwork>(`inspect of network ${idOrName}`, 'GET', `/networks/${idOrName}`));
    return data === undefined ? undefined : networkView(data);
  }

  async imageExists(image: string): Promise<boolean> {
    return (await this.optional(this.call(`inspect of image ${image}`, 'GET', `/images/${imagePathPart(image)}/json`))) !== undefined;
  }

  async pullImage(image: string): Promise<void> {
    const stream = await this.call<Readable>(`pull of image ${image}`, 'POST', '/images/create', {
      query: { fromImage: pullReference(image) }, stream: true, timeoutMs: PULL_TIMEOUT_MS,
    });
    let last = '';
    const deadline = setTimeout(() => stream.destroy(new Error(`pull of ${image} took longer than ${PULL_TIMEOUT_MS} ms`)), PULL_TIMEOUT_MS);
    stream.setEncoding('utf8');
    try {
      for await (const chunk of stream) last = (last + String(chunk)).slice(-4096);
    } catch (err) {
      throw new SandboxError('image_unavailable', `Pulling ${image} failed: ${(err as Error).message}.`, { cause: err });
    } finally {
      clearTimeout(deadline);
    }
    const failure = /"error"\s*:\s*"([^"]*)"/.exec(last);
    if (failure !== null) {
      throw new SandboxError('image_unavailable', `Pulling ${image} failed: ${failure[1]}. Pre-pull or build the image on the engine.`);
    }
  }

  /**
   * Creates and starts an exec (engine-exec.ts): output as it arrives, stdin over the hijacked
   * connection, then the exit code.
   */
  startExec(container: string, request: ExecRequest): Promise<ExecRun> {
    return startExec(this.engine, container, request);
  }

  /** Operator CLI only (engine-logs.ts): a container's log; the socket proxy admits no log route. */
  readLogs(container: string, request: LogRequest): Promise<LogRead> {
    return readContainerLogs(this.engine, container, request);
  }

  /** Operator CLI only (engine-listing.ts): refused by the socket proxy by design. */
  listContainers(labels: readonly string[]): Promise<ContainerSummary[]> {
    return listContainers(this.engine, labels);
  }

  /** Operator CLI only (engine-listing.ts): the containers on a network, stopped ones included. */
  containersOnNetwork(network: { readonly id: string; readonly name: string }): Promise<string[]> {
    return containersOnNetwork(this.engine, network);
  }

  /** The socket proxy admits one exact label: a persistent workspace's. */
  listRunningContainers(labels: readonly string[]): Promise<ContainerSummary[]> {
    return listContainers(this.engine, labels, false);
  }

  /** The socket proxy admits one exact label: a sandbox's name, or the shared network's. */
  listNetworks(labels: readonly string[]): Promise<NetworkView[]> {
    return listNetworks(this.engine, labels);
  }

  /** Operator CLI only. */
  listVolumes(labels: readonly string[]): Promise<ResourceSummary[]> {
    return listVolumes(this.engine, labels);
  }
}
