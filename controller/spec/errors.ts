/**
 * Typed errors of the sandbox controller. Every failure the provider reports is a
 * `SandboxError` with a stable `code` from one catalog, so callers (and tests) branch on
 * the code and people read the message. Messages say what to do next.
 */
import { CodedError, isCodedError } from '../../common/index.js';

/** One entry per failure class; the key is the code. */
export const sandboxErrorCodes = {
  invalid_config: 'The deployment config of the sandbox-docker plugin is invalid.',
  invalid_spec: 'A sandbox spec, option or value was refused before anything was sent to Docker.',
  open_egress_disabled: 'Open egress was requested while the deployment does not allow it.',
  limit_not_expressible: 'A requested limit cannot be enforced by this engine, so the sandbox was not created.',
  not_found: 'The sandbox (its container) does not exist.',
  engine_unavailable: 'The Docker engine (through the socket proxy) did not answer or refused the call.',
  engine_timeout: 'A Docker engine call did not finish in time.',
  engine_tls: 'The TLS connection to a remote engine failed: a client certificate was refused, the engine certificate is not trusted, or only one side speaks TLS.',
  engine_refused: 'The socket proxy or the engine refused a call (HTTP 4xx).',
  engine_error: 'The engine answered a call with an unexpected error.',
  image_unavailable: 'An image is not present on the engine and could not be pulled.',
  file_not_found: 'The file does not exist inside the sandbox.',
  file_too_large: 'The file is larger than the read limit.',
  permission_denied: 'The sandbox user may not read or write that path.',
  is_directory: 'The path is a directory where a file was expected.',
  file_error: 'A file operation inside the sandbox failed.',
  workspace_in_use: 'A persistent workspace is still mounted by a sandbox.',
  egress_unavailable: 'The egress proxy of an allowlist sandbox did not come up.',
  sandbox_full: 'The sandbox stayed at its process limit even after its processes were ended, so the command could not start.',
  exec_failed: 'Docker could not start the command in the sandbox (the container runtime refused the exec).',
  conflict: 'Another call, in this controller or another one, created, removed or changed the same sandbox at the same time.',
  network_not_isolated: 'A network the controller would use lacks the options that keep sandboxes apart: inter-container traffic off on the shared network; internal and without a host address on a sandbox network.',
  allowlist_fixed: 'The sandbox\'s allowlist cannot change while it runs: its egress proxy takes its policy from its environment (secrets or inspected hosts, or a sandbox created before live allowlists).',
  address_pool_exhausted: 'No subnet was free for a network: of the deployment\'s address pool for a sandbox network, or of the engine\'s default-address-pools for the shared network.',
} as const;

export type SandboxErrorCode = keyof typeof sandboxErrorCodes;

/** Every error the controller throws; the project's one base class gives it `code` and `cause`. */
export class SandboxError extends CodedError<SandboxErrorCode> {}

/** True when `err` is a SandboxError, optionally with the given code. */
export function isSandboxError(err: unknown, code?: SandboxErrorCode): err is SandboxError {
  return isCodedError(err, 'SandboxError') && (code === undefined || err.code === code);
}
