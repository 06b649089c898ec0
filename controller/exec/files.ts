/**
 * readFile / writeFile / stat, run inside the sandbox as the sandbox user so permissions and
 * symlinks resolve exactly as they would for its commands (the daemon never writes volumes as
 * root on our behalf). Data streams over the exec connection, never in a request body.
 * `/skills` is read-only for the sandbox user; the controller writes it as root through the
 * root-only mount.
 */
import { posix } from 'node:path';
import { type FileStat, SandboxError } from '../spec/index.js';
import { type SandboxEngine, SKILLS_WRITABLE_ROOT } from '../docker/index.js';
import { type CommandIsolation, FILE_EXIT, ROOT_USER, SANDBOX_USER, isolatedFileCmd, readFileCmd, statCmd, writeFileCmd } from './exec-script.js';
import { startFailure } from './sandbox-full.js';
import { OutputCapture } from './output-capture.js';
import type { CommandRunner, WithRunning } from './commands.js';

const SKILLS_ROOT = '/skills';

export interface FileDeps {
  readonly engine: SandboxEngine;
  readonly withRunning: WithRunning;
  /** Frees a sandbox found at its process limit and tries once more (commands.ts). */
  readonly withRoom: CommandRunner['withRoom'];
  /**
   * The deployment's ceiling of `maxBytes` (maxLimits.readBytes); a read without `maxBytes` is
   * refused above this size rather than cut.
   */
  readonly maxReadBytes: number;
  /** As for commands: each file script runs in a Landlock domain of its own (isolatedFileCmd). */
  readonly isolation: CommandIsolation;
}

/** The exit code and stderr of one file script; stdout is data and is collected by the caller. */
interface ScriptEnd {
  readonly exitCode: number | null;
  readonly stderr: string;
  /** All of stdout when it is short, else empty: Docker writes a failed exec start there. */
  readonly shortStdout: string;
}

/**
 * Whether a file script could not start for want of room (or Docker could not start it). A file
 * script that ran prints its result on stdout and exits 0, so only a failed one's stdout is read.
 */
const noRoom = (r: ScriptEnd) => startFailure(r.exitCode, r.exitCode === 0 ? '' : r.shortStdout, r.stderr);

function checkPath(path: string): string {
  if (typeof path !== 'string' || path.length === 0) throw new SandboxError('invalid_spec', 'A path must be a non-empty string.');
  if (path.includes('\0')) throw new SandboxError('invalid_spec', 'A path cannot contain a NUL character.');
  return path;
}

/** Where a write really goes: `/skills/...` is redirected to the root-only writable mount. */
export function writeTarget(path: string): { path: string; user: string; confineTo?: string } {
  const absolute = posix.normalize(path.startsWith('/') ? path : posix.join('/workspace', path));
  if (absolute === SKILLS_ROOT || absolute.startsWith(`${SKILLS_ROOT}/`)) {
    return { path: SKILLS_WRITABLE_ROOT + absolute.slice(SKILLS_ROOT.length), user: ROOT_USER, confineTo: SKILLS_WRITABLE_ROOT };
  }
  return { path, user: SANDBOX_USER };
}

function fileError(exitCode: number | null, path: string, stderr: string, action: string): SandboxError {
  const detail = stderr.trim().split('\n').pop() ?? '';
  switch (exitCode) {
    case FILE_EXIT.notFound:
      return new SandboxError('file_not_found', `Cannot ${action} ${path}: it does not exist.`);
    case FILE_EXIT.permissionDenied:
      return new SandboxError('permission_denied', `Cannot ${action} ${path}: the sandbox user (uid 1000) is not allowed to (${detail}). Use /workspace or /tmp.`);
    case FILE_EXIT.isDirectory:
      return new SandboxError('is_directory', `Cannot ${action} ${path}: it is a directory.`);
    default:
      return new SandboxError('file_error', `Cannot ${action} ${path}: ${detail || `exit code ${String(exitCode)}`}.`);
  }
}

/** How long a file script may take: 30 s, and a second more per megabyte it moves. */
export function fileScriptDeadlineMs(bytes: number): number {
  return 30_000 + Math.ceil(bytes / 1_000_000) * 1_000;
}

export class FileOps {
  constructor(private readonly deps: FileDeps) {}

  async readFile(name: string, path: string, maxBytes?: number): Promise<Uint8Array> {
    checkPath(path);
    const limit = this.deps.maxReadBytes;
    if (maxBytes !== undefined && (!Number.isInteger(maxBytes) || maxBytes < 0)) {
      throw new SandboxError('invalid_spec', `maxBytes must be a whole number >= 0, got ${String(maxBytes)}.`);
    }
    // The bytes are held in the controller's memory: never more than the deployment allows.
    if (maxBytes !== undefined && maxBytes > limit) {
      throw new SandboxError('invalid_spec', `maxBytes ${maxBytes} is above this deployment's maximum of ${limit} bytes (extensionConfig."sandbox-docker".maxLimits.readBytes).`);
    }
    // Without a caller limit, read one byte more than the limit to tell "too large" apart.
    const readBytes = maxBytes ?? limit + 1;
    let out = new OutputCapture(readBytes);
    const { exitCode, stderr } = await this.deps.withRoom(name, () => {
      out = new OutputCapture(readBytes);
      return this.runScript(name, readFileCmd(path, readBytes), SANDBOX_USER, undefined, out, readBytes);
    }, noRoom);
    if (exitCode !== 0) throw fileError(exitCode, path, stderr, 'read');
    const bytes = out.bytesRaw();
    if (maxBytes === undefined && bytes.length > limit) {
      throw new SandboxError('file_too_large', `${path} is larger than ${limit} bytes; pass maxBytes to read a prefix.`);
    }
    // A plain Uint8Array with its own ArrayBuffer (small Buffers share Node's allocation pool).
    return new Uint8Array(bytes);
  }

  async writeFile(name: string, path: string, data: Uint8Array | string): Promise<void> {
    checkPath(path);
    if (typeof data !== 'string' && !(data instanceof Uint8Array)) throw new SandboxError('invalid_spec', 'data must be a string or a Uint8Array.');
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const target = writeTarget(path);
    const { exitCode, stderr } = await this.deps.withRoom(name, () => this.runScript(name, writeFileCmd(target.path, target.confineTo), target.user, bytes, undefined, bytes.length), noRoom);
    if (exitCode !== 0) throw fileError(exitCode, path, stderr, 'write');
  }

  async stat(name: string, path: string): Promise<FileStat | null> {
    checkPath(path);
    let out = new OutputCapture(4096);
    const { exitCode, stderr } = await this.deps.withRoom(name, () => {
      out = new OutputCapture(4096);
      return this.runScript(name, statCmd(path), SANDBOX_USER, undefined, out, 4096);
    }, noRoom);
    if (exitCode === FILE_EXIT.notFound) return null;
    if (exitCode !== 0) throw fileError(exitCode, path, stderr, 'stat');
    return parseStat(out.text());
  }

  /**
   * Runs one file script on the running sandbox; stdout goes to `out` (dropped without one), and
   * at most `bytes` move either way. The script runs as a user whose other processes may stop it
   * (SIGSTOP needs no more than the same uid), so the controller does not wait on it past a
   * deadline of its own: then the exec is let go, and the call fails saying why.
   */
  private runScript(name: string, cmd: string[], user: string, stdin: Uint8Array | undefined, out: OutputCapture | undefined, bytes: number): Promise<ScriptEnd> {
    const err = new OutputCapture(16 * 1024);
    const head = new OutputCapture(4 * 1024);
    const deadlineMs = fileScriptDeadlineMs(bytes);
    return this.deps.withRunning(name, async () => {
      const run = await this.deps.engine.startExec(name, {
        cmd: isolatedFileCmd(cmd, this.deps.isolation),
        user,
        stdin,
        onOutput: (stream, chunk) => {
          if (stream === 'stdout') {
            out?.push(chunk);
            head.push(chunk);
          } else err.push(chunk);
        },
      });
      let late: NodeJS.Timeout | undefined;
      const exitCode = await Promise.race([
        run.finished,
        new Promise<never>((_, reject) => {
          late = setTimeout(() => {
            run.detach();
            reject(new SandboxError('file_error', `A file operation in ${name} did not finish within ${Math.round(deadlineMs / 1000)} s: a process in the sandbox may have stopped it. killAll ends every process of the sandbox user.`));
          }, deadlineMs);
        }),
      ]).finally(() => clearTimeout(late));
      return { exitCode, stderr: err.text(), shortStdout: head.truncated ? '' : head.text() };
    });
  }
}

/** Parses `%F|%s|%a|%.3Y` from GNU stat. */
export function parseStat(line: string): FileStat {
  const [kind = '', size = '', mode = '', mtime = ''] = line.trim().split('|');
  const type: FileStat['type'] =
    kind === 'regular file' || kind === 'regular empty file' ? 'file'
      : kind === 'directory' ? 'directory'
        : kind === 'symbolic link' ? 'symlink'
          : 'other';
  return { type, size: Number(size), mode: Number.parseInt(mode, 8), mtimeMs: Math.round(Number(mtime) * 1000) };
}
