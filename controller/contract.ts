/**
 * The `sandbox@1` contract. The host application's SDK is not published, so this package owns
 * the types; names are fixed by the product spec (conformance tests call them).
 */

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

export type EgressTier = 'none' | 'internal' | 'allowlist' | 'open';

export interface SandboxLimits {
  /** CPUs (fractions allowed). */
  cpu?: number;
  memoryMb?: number;
  diskMb?: number;
  egress: EgressTier;
  /** Host names (punycode) the allowlist tier may reach; `*.example.com` for subdomains. */
  allowHosts?: string[];
}

export interface SandboxWorkspace {
  key: string;
  /** Default `ephemeral`. A persistent workspace survives `destroy`. */
  durability: 'ephemeral' | 'persistent';
}

export interface SandboxSpec {
  /** Conversation id; the resource name is `cap-${id}`. */
  id: string;
  image: string;
  limits: SandboxLimits;
  env?: Record<string, string>;
  workspace?: SandboxWorkspace;
}

export interface ExecOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  cwd?: string;
  env?: Record<string, string>;
  /** Holder tag for `killTagged`. */
  tag?: string;
  /** Cap per output stream; the cut backs up to a whole UTF-8 character. */
  maxOutputBytes?: number;
  stdin?: Uint8Array | string;
}

export interface ExecResult {
  /** `null` when the command was killed (timeout or abort). */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  truncated: boolean;
  timedOut: boolean;
  aborted: boolean;
}

export interface FileStat {
  type: 'file' | 'directory' | 'symlink' | 'other';
  size: number;
  /** Permission bits (`st_mode & 0o7777`). */
  mode: number;
  mtimeMs: number;
}
