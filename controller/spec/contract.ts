/**
 * The `sandbox@1` contract. The host application's SDK is not published, so this package owns
 * the types; names are fixed by the product spec (conformance tests call them).
 */
import type { SandboxSpec } from './sandbox-spec.js';
import type { ExecOptions } from './exec-options.js';

/** What the `sandbox@1` capability provides. */
export interface SandboxProvider {
  /** Commands and file operations may run in one sandbox at the same time. */
  readonly concurrentExec: true;
  /** Creates (replacing any stale instance of the same name) and starts a sandbox. */
  create(spec: SandboxSpec): Promise<SandboxHandle>;
  /** Stops the sandbox and its egress proxy; files stay on the volumes, processes end. */
  suspend(h: SandboxHandle): Promise<void>;
  /** Starts a suspended sandbox again; `gone` when its container no longer exists. */
  resume(h: SandboxHandle): Promise<'running' | 'gone'>;
  /** Removes every resource of the sandbox; a missing one counts as success. */
  destroy(h: SandboxHandle): Promise<void>;
  /** As `destroy`, by resource name (`cap-<id>`). */
  destroyByName(name: string): Promise<void>;
  /** Runs `bash -c command` as the sandbox user. */
  exec(h: SandboxHandle, command: string, opts?: ExecOptions): Promise<ExecResult>;
  readFile(h: SandboxHandle, path: string, opts?: { maxBytes?: number }): Promise<Uint8Array>;
  writeFile(h: SandboxHandle, path: string, data: Uint8Array | string): Promise<void>;
  /** `null` when the path does not exist. Symlinks are reported, not followed. */
  stat(h: SandboxHandle, path: string): Promise<FileStat | null>;
  /** Kills every command started through `exec` that is still running. */
  killAll(h: SandboxHandle): Promise<void>;
  /** Kills only the running commands started with one of `tags`. */
  killTagged(h: SandboxHandle, tags: string[]): Promise<void>;
  /** Removes a persistent workspace volume; never forced, so a mounted one is refused. */
  destroyWorkspace(key: string): Promise<void>;
}

/** `id` is the resource name `cap-<conversation id>`. */
export interface SandboxHandle {
  id: string;
}

// The spec and exec option types are inferred from the schemas that check them at the edge.
export type { EgressTier, SandboxLimits, SandboxSpec, SandboxWorkspace } from './sandbox-spec.js';
export type { ExecOptions } from './exec-options.js';
export interface ExecResult {
  /** `null` when the command was killed (timeout or abort). */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  truncated: boolean;
  timedOut: boolean;
  aborted: boolean;
  /**
   * Present, and true, when the container was restarted before the command ran, because a
   * process of the sandbox user outlived the kill that `fresh` (or a full sandbox) asked for:
   * files on volumes are kept, /tmp is cleared, every other process ended.
   */
  restarted?: true;
}

export interface FileStat {
  type: 'file' | 'directory' | 'symlink' | 'other';
  size: number;
  /** Permission bits (`st_mode & 0o7777`). */
  mode: number;
  mtimeMs: number;
}
