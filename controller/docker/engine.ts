/**
 * The Docker objects the controller uses, by name: containers, volumes, networks, images. Every
 * call goes through engine-call.ts (exact requests, deadlines, error mapping); exec streaming
 * and the operator's listing live in engine-exec.ts and engine-listing.ts and are reached here
 * so that callers hold one engine object. Containers are always addressed by name.
 */
import type { Readable } from 'node:stream';
import { SandboxError } from '../spec/index.js';
import { EngineCaller, type EngineOptions } from './engine-call.js';
import { startExec, type ExecRequest, type ExecRun } from './engine-exec.js';
import { listContainers, listNetworks, listVolumes, type ContainerSummary, type ResourceSummary } from './engine-listing.js';
import { networkConnectBody } from './network-spec.js';
import type { ContainerView, SandboxEngine } from './sandbox-engine.js';

export { EngineStatusError, engineStatus } from './engine-call.js';
export type { ExecRequest, ExecRun } from './engine-exec.js';
export type { ContainerSummary, ResourceSummary } from './engine-listing.js';

const PULL_TIMEOUT_MS = 10 * 60_000;

export interface NetworkView {
  readonly internal: boolean;
  readonly options: Readonly<Record<string, string>>;
  readonly labels: Readonly<Record<string, string>>;
  readonly gateways: readonly string[];
  readonly members: ReadonlyArray<{ readonly name: string; readonly ipv4: string }>;
}

/** The sandbox calls (sandbox-engine.ts) and the operator CLI's own: ping, network inspect, image checks, listing. */
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
        State?: { Status?: string; Running?: boolean; Paused?: boolean };
        Config?: { Labels?: Record<string, string> | null; Image?: string; User?: string; Cmd?: string[] | null; WorkingDir?: string; Env?: string[] | null };
        HostConfig?: Record<string, unknown>;
      }>(`inspect of container ${name}`, 'GET', `/containers/${name}/json`),
    );
    if (data === undefined) return undefined;
    return {
      status: data.State?.Status ?? 'unknown',
      running: data.State?.Running === true,
      paused: data.State?.Paused === true,
      labels: data.Config?.Labels ?? {},
      image: data.Config?.Image ?? '',
      user: data.Config?.User ?? '',
      cmd: data.Config?.Cmd ?? [],
      workingDir: data.Config?.WorkingDir ?? '',
      env: data.Config?.Env ?? [],
      hostConfig: data.HostConfig ?? {},
    };
  }

  async createContainer(name: string, body: unknown): Promise<void> {
    await this.call(`create of container ${name}`, 'POST', '/containers/create', { query: { name }, body, timeoutMs: this.callTimeoutMs * 2 });
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

  async volumeExists(name: string): Promise<boolean> {
    return (await this.optional(this.call(`inspect of volume ${name}`, 'GET', `/volumes/${name}`))) !== undefined;
  }

  async createVolume(body: { Name: string }): Promise<void> {
    await this.call(`create of volume ${body.Name}`, 'POST', '/volumes/create', { body });
  }

  /** Unforced: the engine refuses (409) while a container uses the volume. */
  async removeVolume(name: string): Promise<void> {
    await this.optional(this.call(`removal of volume ${name}`, 'DELETE', `/volumes/${name}`));
  }

  async networkExists(name: string): Promise<boolean> {
    return (await this.optional(this.call(`inspect of network ${name}`, 'GET', `/networks/${name}`))) !== undefined;
  }

  async createNetwork(body: { Name: string }): Promise<void> {
    await this.call(`create of network ${body.Name}`, 'POST', '/networks/create', { body });
  }

  async removeNetwork(name: string): Promise<void> {
    await this.optional(this.call(`removal of network ${name}`, 'DELETE', `/networks/${name}`));
  }

  async connectNetwork(network: string, container: string): Promise<void> {
    await this.call(`connection of ${container} to network ${network}`, 'POST', `/networks/${network}/connect`, { body: networkConnectBody(container) });
  }

  async inspectNetwork(name: string): Promise<NetworkView | undefined> {
    const data = await this.optional(this.call<{
      Internal?: boolean; Options?: Record<string, string> | null; Labels?: Record<string, string> | null;
      IPAM?: { Config?: Array<{ Gateway?: string; Subnet?: string }> | null };
      Containers?: Record<string, { Name?: string; IPv4Address?: string }> | null;
    }>(`inspect of network ${name}`, 'GET', `/networks/${name}`));
    if (data === undefined) return undefined;
    return {
      internal: data.Internal === true,
      options: data.Options ?? {},
      labels: data.Labels ?? {},
      gateways: (data.IPAM?.Config ?? []).map((c) => c.Gateway ?? '').filter((g) => g !== ''),
      members: Object.values(data.Containers ?? {}).map((c) => ({ name: c.Name ?? '', ipv4: (c.IPv4Address ?? '').split('/')[0] ?? '' })),
    };
  }

  async imageExists(image: string): Promise<boolean> {
    return (await this.optional(this.call(`inspect of image ${image}`, 'GET', `/images/${image}/json`))) !== undefined;
  }

  async pullImage(image: string): Promise<void> {
    const stream = await this.call<Readable>(`pull of image ${image}`, 'POST', '/images/create', {
      query: { fromImage: image }, stream: true, timeoutMs: PULL_TIMEOUT_MS,
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

  /** Operator CLI only (engine-listing.ts): refused by the socket proxy by design. */
  listContainers(labels: readonly string[]): Promise<ContainerSummary[]> {
    return listContainers(this.engine, labels);
  }

  listNetworks(labels: readonly string[]): Promise<ResourceSummary[]> {
    return listNetworks(this.engine, labels);
  }

  listVolumes(labels: readonly string[]): Promise<ResourceSummary[]> {
    return listVolumes(this.engine, labels);
  }
}
