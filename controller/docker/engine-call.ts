/**
 * One Docker API call: the exact path, query and body the caller names (dockerode's own helpers
 * would copy create bodies into the query string), a deadline, and every failure mapped to a
 * SandboxError. The rest of the engine layer (engine.ts, engine-exec.ts, engine-listing.ts) is
 * built on this; nothing else in the controller dials Docker.
 */
import Docker from 'dockerode';
import type { Logger } from 'pino';
import { isCodedError } from '../../common/index.js';
import { SandboxError, serialiseAsciiBody } from '../spec/index.js';
import { modemOptions } from './endpoint.js';
import { tlsFailure, type TlsContext } from './tls-failure.js';

const DEFAULT_CALL_TIMEOUT_MS = 30_000;
/** The socket proxy's cap on a request body (haproxy.cfg, `body_too_large`). */
export const MAX_BODY_BYTES = 32 * 1024;

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
  /** The socket proxy answered (a refusal), not Docker: its 403 means "not allowed", Docker's "in use" or "overlaps". */
  readonly byProxy: boolean;

  constructor(code: 'engine_refused' | 'engine_error', status: number, message: string, cause: unknown, byProxy = false) {
    super(code, message, { cause });
    this.status = status;
    this.byProxy = byProxy;
  }
}

/** True when `err` is an EngineStatusError (by brand: also one of another copy of this package). */
export function isEngineStatusError(err: unknown): err is EngineStatusError {
  return isCodedError(err, 'EngineStatusError');
}

/** The socket proxy's refusal of an image (its X-Socket-Proxy-Deny reason), if that is what `err` is. */
export function imageRefusal(err: unknown): string | undefined {
  if (!isEngineStatusError(err) || !err.byProxy) return undefined;
  return /\b(image_not_allowed|registry_not_allowed:\S+|mount_image_not_listed:\S+|mount_image_volume:\S+)/.exec(err.message)?.[1];
}

/** Docker's own answer ({"message": ...}), as opposed to the socket proxy's plain-text refusal. */
function dockerMessage(err: ModemError): string | undefined {
  const json = err.json as { message?: unknown } | undefined;
  return json !== null && typeof json === 'object' && typeof json.message === 'string' ? json.message : undefined;
}

/** HTTP status of a failed engine call, if it got that far. */
export function engineStatus(err: unknown): number | undefined {
  return isEngineStatusError(err) ? err.status : undefined;
}

function mapError(err: ModemError, what: string, timeoutMs: number): SandboxError {
  if (err.name === 'AbortError' || err.code === 'ABORT_ERR') {
    return new SandboxError('engine_timeout', `Docker did not answer ${what} within ${timeoutMs} ms; check the engine and the socket proxy.`, { cause: err });
  }
  if (typeof err.statusCode === 'number') {
    const status = err.statusCode;
    const fromDocker = dockerMessage(err);
    const detail = (fromDocker ?? err.message).trim();
    // Docker answers 403 too ("Pool overlaps", "has active endpoints"), always with a JSON message.
    if (status === 403 && fromDocker === undefined) {
      return new EngineStatusError('engine_refused', status, `The socket proxy refused ${what} (403): ${detail}`, err, true);
    }
    return new EngineStatusError(status < 500 ? 'engine_refused' : 'engine_error', status, `Docker answered ${what} with ${status}: ${detail}`, err);
  }
  return new SandboxError('engine_unavailable', `Cannot reach the Docker endpoint for ${what}: ${err.message}`, { cause: err });
}

interface CallOptions {
  readonly query?: Record<string, string | number | boolean>;
  readonly body?: unknown;
  /** A body sent as these bytes (an archive), not as JSON. */
  readonly file?: Buffer;
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

export class EngineCaller {
  private readonly modem: Modem;
  private readonly logger: Logger | undefined;
  private readonly tls: TlsContext;
  readonly callTimeoutMs: number;

  constructor(options: EngineOptions) {
    const docker = new Docker(modemOptions(options.endpoint, options.tlsCertDir) as Docker.DockerOptions);
    this.modem = docker.modem as unknown as Modem;
    this.logger = options.logger;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.tls = { endpoint: options.endpoint, tlsCertDir: options.tlsCertDir };
  }
  call<T>(what: string, method: string, path: string, options: CallOptions = {}): Promise<T> {
    const timeoutMs = options.timeoutMs ?? this.callTimeoutMs;
    let dialOptions: Record<string, unknown> | undefined;
    if (options.body !== undefined) {
      const json = serialiseAsciiBody(options.body, what);
      if (Buffer.byteLength(json) > MAX_BODY_BYTES) {
        throw new SandboxError('invalid_spec', `The ${what} body is ${Buffer.byteLength(json)} bytes, over the socket proxy's ${MAX_BODY_BYTES / 1024} KiB limit (a very long allowlist or env?).`);
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
          ...(options.file === undefined ? {} : { file: options.file }),
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
  async optional<T>(promise: Promise<T>): Promise<T | undefined> {
    try {
      return await promise;
    } catch (err) {
      if (engineStatus(err) === 404) return undefined;
      throw err;
    }
  }
}
