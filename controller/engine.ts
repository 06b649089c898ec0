/**
 * The only file that talks to Docker. Thin: every call names its path, query and body
 * explicitly (dockerode's own helpers would copy create bodies into the query string), has a
 * deadline, and maps failures to SandboxErrors. Containers are always addressed by name.
 */
import type { Duplex, Readable } from 'node:stream';
import Docker from 'dockerode';
import type { Logger } from 'pino';
import { SandboxError } from './errors.js';
import { modemOptions } from './endpoint.js';
import { serialiseAsciiBody } from './ascii-body.js';
import { StreamDemux } from './stream-demux.js';
import { tlsFailure, type TlsContext } from './tls-failure.js';

const DEFAULT_CALL_TIMEOUT_MS = 30_000;
const PULL_TIMEOUT_MS = 10 * 60_000;
const MAX_BODY_BYTES = 32 * 1024;

export interface ContainerView {
  readonly status: string;
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

export interface ExecRequest {
  readonly cmd: readonly string[];
  readonly user: string;
  readonly stdin?: Uint8Array | undefined;
  readonly onOutput: (stream: 'stdout' | 'stderr', chunk: Buffer) => void;
}

export interface ExecRun {
  readonly id: string;
  /** Resolves when the output stream has ended, with the exit code (null if unknown). */
  readonly finished: Promise<number | null>;
  /** Drops the connection; the process keeps running (kill it separately). */
  detach(): void;
}

export interface ContainerSummary {
  readonly id: string;
  readonly name: string;
  readonly image: string;
  readonly state: string;
  readonly status: string;
  readonly createdMs: number;
  readonly labels: Readonly<Record<string, string>>;
}

/** A listed network or volume (a volume's id is its name). */
export interface ResourceSummary {
  readonly id: string;
  readonly name: string;
  readonly createdMs: number;
  readonly labels: Readonly<Record<string, string>>;
}

export interface NetworkView {
  readonly internal: boolean;
  readonly options: Readonly<Record<string, string>>;
  readonly labels: Readonly<Record<string, string>>;
  readonly gateways: readonly string[];
  readonly members: ReadonlyArray<{ readonly name: string; readonly ipv4: string }>;
}

interface ModemError extends Error {
  statusCode?: number;
  json?: unknown;
  code?: string;
}

type Modem = {
  dial(options: Record<string, unknown>, callback: (err: ModemError | null, data: unknown) => void): void;
};

export class EngineStatusError extends SandboxError {
  readonly status: number;

  constructor(code: 'engine_refused' | 'engine_error', status: number, message: string, cause: unknown) {
    super(code, message, { cause });
    this.status = status;
  }
}

function engineMessage(err: ModemError): string {
  const json = err.json as { message?: unknown } | undefined;
  if (json !== null && typeof json === 'object' && typeof json.message === 'string') return json.message;
  return err.message;
}

/** HTTP status of a failed engine call, if it got that far. */
export function engineStatus(err: unknown): number | undefined {
  return err instanceof EngineStatusError ? err.status : undefined;
}

function mapError(err: ModemError, what: string, timeoutMs: number): SandboxError {
  if (err.name === 'AbortError' || err.code === 'ABORT_ERR') {
    return new SandboxError('engine_timeout', `Docker did not answer ${what} within ${timeoutMs} ms; check the engine and the socket proxy.`, { cause: err });
  }
  if (typeof err.statusCode === 'number') {
    const status = err.statusCode;
    const detail = engineMessage(err).trim();
    if (status === 403) {
      return new EngineStatusError('engine_refused', status, `The socket proxy refused ${what} (403): ${detail}`, err);
    }
    return new EngineStatusError(status < 500 ? 'engine_refused' : 'engine_error', status, `Docker answered ${what} with ${status}: ${detail}`, err);
  }
  return new SandboxError('engine_unavailable', `Cannot reach the Docker endpoint for ${what}: ${err.message}`, { cause: err });
}

interface CallOptions {
  readonly query?: Record<string, string | number | boolean>;
  readonly body?: unknown;
  readonly timeoutMs?: number;
  readonly stream?: boolean;
  readonly hijack?: boolean;
}

export interface EngineOptions {
  readonly endpoint: string;
  readonly tlsCertDir?: string | undefined;
  readonly logger?: Logger | undefined;
  /** Deadline of ordinary calls (longer ones scale from it). */
  readonly callTimeoutMs?: number | undefined;
}

export class DockerEngine {
  private readonly modem: Modem;

  private readonly logger: Logger | undefined;
  private readonly callTimeoutMs: number;
  private readonly tls: TlsContext;

  constructor(options: EngineOptions) {
    const docker = new Docker(modemOptions(options.endpoint, options.tlsCertDir) as Docker.DockerOptions);
    this.modem = docker.modem as unknown as Modem;
    this.logger = options.logger;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.tls = { endpoint: options.endpoint, tlsCertDir: options.tlsCertDir };
  }

  private call<T>(what: string, method: string, path: string, options: CallOptions = {}): Promise<T> {
    const timeoutMs = options.timeoutMs ?? this.callTimeoutMs;
    let dialOptions: Record<string, unknown> | undefined;
    if (options.body !== undefined) {
      const json = serialiseAsciiBody(options.body, what);
      if (Buffer.byteLength(json) > MAX_BODY_BYTES) {
        throw new SandboxError('invalid_spec', `The ${what} body is ${Buffer.byteLength(json)} bytes, over the socket proxy's 32 KiB limit (a very long allowlist or env?).`);
      }
      dialOptions = { _body: options.body };
    }
    if (options.query !== undefined) dialOptions = { ...(dialOptions ?? { _body: {} }), _query: options.query };
    // The deadline covers the call until its answer arrives. For a stream (exec output, pull)
    // that is the response head: a long command must not be cut off by the call deadline.
    const started = performance.now();
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    return new Promise<T>((resolve, reject) => {
      this.modem.dial(
        {
          path: options.query === undefined ? path : `${path}?`,
          method,
          options: dialOptions,
          abortSignal: abort.signal,
          isStream: options.stream === true || options.hijack === true,
          hijack: options.hijack === true,
          openStdin: false,
          statusCodes: { 200: true, 201: true, 204: true, 304: true },
        },
        (err, data) => {
          clearTimeout(timer);
          this.logger?.debug({ call: what, method, path, status: err?.statusCode, ms: Math.round(performance.now() - started) }, 'engine call');
          if (err !== null) {
            void tlsFailure(err, what, this.tls).then(
              (tlsErr) => reject(tlsErr ?? mapError(err, what, timeoutMs)),
              () => reject(mapError(err, what, timeoutMs)),
            );
          } else {
            resolve(data as T);
          }
        },
      );
    });
  }

  /** Runs a call that may 404; returns undefined then. */
  private async optional<T>(promise: Promise<T>): Promise<T | undefined> {
    try {
      return await promise;
    } catch (err) {
      if (engineStatus(err) === 404) return undefined;
      throw err;
    }
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
    await this.call(`connection of ${container} to network ${network}`, 'POST', `/networks/${network}/connect`, { body: { Container: container } });
  }

  /**
   * Listing, for the operator CLI only: the socket proxy refuses these calls by design (403), so
   * they work only against the engine itself. Always filtered by labels (all must match).
   */
  async listContainers(labels: readonly string[]): Promise<ContainerSummary[]> {
    const rows = await this.call<Array<{ Id: string; Names?: string[]; Image?: string; State?: string; Status?: string; Created?: number; Labels?: Record<string, string> | null }>>(
      'listing of containers', 'GET', '/containers/json', { query: { all: true, filters: labelFilter(labels) } },
    );
    return rows.map((c) => ({
      id: c.Id,
      name: (c.Names?.[0] ?? '').replace(/^\//, ''),
      image: c.Image ?? '',
      state: c.State ?? 'unknown',
      status: c.Status ?? '',
      createdMs: (c.Created ?? 0) * 1000,
      labels: c.Labels ?? {},
    }));
  }

  async listNetworks(labels: readonly string[]): Promise<ResourceSummary[]> {
    const rows = await this.call<Array<{ Id: string; Name: string; Created?: string; Labels?: Record<string, string> | null }>>(
      'listing of networks', 'GET', '/networks', { query: { filters: labelFilter(labels) } },
    );
    return rows.map((n) => ({ id: n.Id, name: n.Name, createdMs: Date.parse(n.Created ?? '') || 0, labels: n.Labels ?? {} }));
  }

  async listVolumes(labels: readonly string[]): Promise<ResourceSummary[]> {
    const data = await this.call<{ Volumes?: Array<{ Name: string; CreatedAt?: string; Labels?: Record<string, string> | null }> | null }>(
      'listing of volumes', 'GET', '/volumes', { query: { filters: labelFilter(labels) } },
    );
    return (data.Volumes ?? []).map((v) => ({ id: v.Name, name: v.Name, createdMs: Date.parse(v.CreatedAt ?? '') || 0, labels: v.Labels ?? {} }));
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
   * Creates and starts an exec. Output is delivered as it arrives; stdin, if any, is streamed
   * over the hijacked connection (never in a request body) and then half-closed.
   */
  async startExec(container: string, request: ExecRequest): Promise<ExecRun> {
    const withStdin = request.stdin !== undefined;
    const created = await this.call<{ Id: string }>(`exec in container ${container}`, 'POST', `/containers/${container}/exec`, {
      body: { AttachStdin: withStdin, AttachStdout: true, AttachStderr: true, Tty: false, User: request.user, Cmd: request.cmd },
    });
    const id = created.Id;
    if (!/^[0-9a-f]{64}$/.test(id)) throw new SandboxError('engine_error', `Docker returned an unexpected exec id for ${container}.`);
    const stream = await this.call<Duplex>(`start of exec in ${container}`, 'POST', `/exec/${id}/start`, {
      body: { Detach: false, Tty: false }, hijack: withStdin, stream: true,
    });
    const demux = new StreamDemux(request.onOutput);
    const ended = new Promise<void>((resolve, reject) => {
      stream.on('data', (chunk: Buffer) => {
        try {
          demux.push(chunk);
        } catch (err) {
          stream.destroy();
          reject(new SandboxError('engine_error', `Exec output from ${container} was malformed.`, { cause: err }));
        }
      });
      stream.on('end', () => resolve());
      stream.on('close', () => resolve());
      stream.on('error', () => resolve());
    });
    if (withStdin) void this.feedStdin(stream, request.stdin ?? new Uint8Array());
    const finished = ended.then(() => this.exitCode(id));
    return { id, finished, detach: () => stream.destroy() };
  }

  private async feedStdin(stream: Duplex, data: Uint8Array): Promise<void> {
    const CHUNK = 64 * 1024;
    try {
      for (let offset = 0; offset < data.length; offset += CHUNK) {
        if (stream.destroyed) return;
        if (!stream.write(data.subarray(offset, offset + CHUNK))) await drained(stream);
      }
      stream.end();
    } catch {
      // The command stopped reading (or the connection was dropped); its exit code says why.
    }
  }

  /** The exit code of a finished exec; polls briefly because the stream can end first. */
  private async exitCode(id: string): Promise<number | null> {
    for (let attempt = 0; attempt < 20; attempt += 1) {
      const data = await this.optional(this.call<{ Running?: boolean; ExitCode?: number | null }>('exec inspect', 'GET', `/exec/${id}/json`));
      if (data === undefined) return null;
      if (data.Running !== true) return typeof data.ExitCode === 'number' ? data.ExitCode : null;
      await new Promise((r) => setTimeout(r, 25 * (attempt + 1)));
    }
    return null;
  }
}

function labelFilter(labels: readonly string[]): string {
  if (labels.length === 0) throw new SandboxError('invalid_spec', 'A listing needs at least one label filter.');
  return JSON.stringify({ label: labels });
}

/** Resolves on 'drain' or 'close', removing both listeners either way. */
function drained(stream: Duplex): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}
