/**
 * Running commands in a sandbox: `exec` with timeout, abort and output caps, and the kills
 * (one command, by tag, all). A kill that cannot even start (the pids limit is used up)
 * falls back to restarting the container, which ends every process in it. A sandbox found at
 * its process limit before a command could start is freed first (as killAll does) and the
 * command started once more. An exec that ended before the command began (no start byte) is an
 * error naming the cause, never the command's exit status.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { type ExecCeilings, type ExecResult, SandboxError, checkExecOptions, isSandboxError, type CheckedExecOptions } from '../spec/index.js';
import type { ExecRun, SandboxEngine } from '../docker/index.js';
import {
  BACKSTOP_GRACE_SECONDS,
  KILL_OK_MARKER,
  MAX_INLINE_PAYLOAD,
  SANDBOX_USER,
  STARTED_BYTE,
  commandPayload,
  encodeArg,
  execMark,
  execMarkEnv,
  killAllCmd,
  killMarkedCmd,
  killTaggedCmd,
  stagedPayload,
  wrapperCmd,
} from './exec-script.js';
import { OutputCapture } from './output-capture.js';
import { commandStartFailure, type StartFailure } from './sandbox-full.js';

/** Looks at a sandbox whose exec failed to start, and the time between them (withRoom). */
const CHANGE_LOOKS = 3;
const CHANGE_LOOK_MS = 300;

const KILL_DEADLINE_MS = 10_000;
/** After a kill, how long the output stream may take to end before it is dropped. */
const DRAIN_AFTER_KILL_MS = 5_000;

/** Runs `fn` on a running container; starts it first and retries once on a 409. */
export type WithRunning = <T>(name: string, fn: () => Promise<T>) => Promise<T>;

export interface CommandDeps {
  readonly engine: SandboxEngine;
  readonly withRunning: WithRunning;
  /**
   * Restarts a running container, ending every process in it, as one change in the sandbox's
   * lane (sandbox-lanes.ts): after a suspend or destroy it has nothing left to do.
   */
  readonly restart: (name: string) => Promise<void>;
  readonly logger: Logger;
  /** The deployment's upper bounds of exec options. */
  readonly ceilings: ExecCeilings;
}

/** One try at a command, and whether the command began (its shell wrote STARTED_BYTE). */
interface Attempt {
  readonly result: ExecResult;
  readonly started: boolean;
}

/**
 * Whether an attempt is no result at all: the command never began and was not stopped by the
 * caller's timeout or abort (which are results, whenever they came).
 */
function notStarted(a: Attempt): StartFailure | undefined {
  if (a.started || a.result.timedOut || a.result.aborted) return undefined;
  return commandStartFailure(a.result.exitCode, a.result.stdout, a.result.stderr);
}

interface RunOutput {
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function toBytes(data: Uint8Array | string): Uint8Array {
  return typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
}

export class CommandRunner {
  constructor(private readonly deps: CommandDeps) {}

  async exec(name: string, rawCommand: unknown, rawOptions?: unknown): Promise<ExecResult> {
    const { command, options } = checkExecOptions(rawCommand, rawOptions, this.deps.ceilings);
    if (options.signal?.aborted === true) {
      return { exitCode: null, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: true };
    }
    // Ends what earlier commands left behind, before this one exists: a process of theirs could
    // otherwise write into its output or kill it (a sandbox is one trust domain for uid 1000).
    if (options.fresh) await this.killAll(name);
    // Once the command began, the output is its own, whatever it says.
    const { result } = await this.withRoom(name, () => this.execOnce(name, command, options), notStarted);
    return result;
  }

  async killAll(name: string): Promise<void> {
    await this.deps.withRunning(name, () => this.runKill(name, killAllCmd()));
  }

  async killTagged(name: string, tags: readonly string[]): Promise<void> {
    if (!Array.isArray(tags)) throw new SandboxError('invalid_spec', 'tags must be an array of strings.');
    if (tags.length === 0) return;
    const cmd = killTaggedCmd(tags);
    await this.deps.withRunning(name, () => this.runKill(name, cmd));
  }

  /**
   * Runs `attempt`; when it reports that the sandbox had no room to start anything, frees the
   * sandbox as killAll does (every process of the sandbox user ends; a restart if even that
   * cannot run) and tries once more. Still no room, or Docker failing to start the exec for
   * another reason, is an error that names the cause.
   */
  async withRoom<R>(name: string, attempt: () => Promise<R>, failureOf: (r: R) => StartFailure | undefined): Promise<R> {
    const first = await attempt();
    const failure = failureOf(first);
    if (failure === undefined) return first;
    if (failure.kind === 'failed') {
      // Running when this call began: stopped or gone now means another call (a destroy or
      // suspend in another controller process) changed the sandbox meanwhile. An engine that
      // cannot say leaves the failure as it is.
      // The engine reports a container it is killing as running for a moment after the kill
      // reached the exec (exit 137): a few looks, a moment apart, before calling it a failure.
      for (let look = 0; look < CHANGE_LOOKS; look++) {
        if (look > 0) await new Promise((r) => setTimeout(r, CHANGE_LOOK_MS));
        const now = await this.deps.engine.inspectContainer(name).catch(() => 'unknown' as const);
        if (now === 'unknown') break;
        if (now === undefined || !now.running || now.status === 'removing') {
          throw new SandboxError('conflict', `${name} was stopped or removed by another call while the command started (${failure.detail}); retry.`);
        }
      }
      throw new SandboxError('exec_failed', `The command could not start in ${name}: ${failure.detail}`);
    }
    this.deps.logger.warn({ sandbox: name, event: 'sandbox_full', detail: failure.detail }, 'sandbox at its process limit, ending its processes before the command');
    await this.killAll(name);
    const second = await attempt();
    const again = failureOf(second);
    if (again === undefined) return second;
    throw new SandboxError(
      again.kind === 'full' ? 'sandbox_full' : 'exec_failed',
      `The command could not start in ${name} even after its processes were ended (${again.detail}); destroy and create the sandbox again.`,
    );
  }

  private async execOnce(name: string, command: string, options: CheckedExecOptions): Promise<Attempt> {
    const mark = execMark(options.tag, randomUUID());
    const script = commandPayload(command, options.env, options.cwd);
    const callerStdin = options.stdin === undefined ? undefined : toBytes(options.stdin);
    let payload = encodeArg(script);
    let stdin = callerStdin;
    if (payload.length > MAX_INLINE_PAYLOAD) {
      // Too large for an exec body: on stdin, ahead of the caller's own (nothing is staged in a
      // file the sandbox could fill or rewrite).
      const staged = stagedPayload(script, mark);
      payload = `-${staged.length}`;
      stdin = callerStdin === undefined ? staged : Buffer.concat([staged, callerStdin]);
    }
    const backstop = Math.ceil(options.timeoutMs / 1000) + BACKSTOP_GRACE_SECONDS;
    const stdout = new OutputCapture(options.maxOutputBytes);
    const stderr = new OutputCapture(options.maxOutputBytes);
    let started = false;
    let stderrSeen = false;
    const run = await this.deps.withRunning(name, () =>
      this.deps.engine.startExec(name, {
        cmd: wrapperCmd(backstop, payload),
        env: execMarkEnv(mark),
        user: SANDBOX_USER,
        stdin,
        onOutput: (stream, chunk) => {
          if (stream === 'stdout') return stdout.push(chunk);
          if (!stderrSeen && chunk.length > 0) {
            stderrSeen = true;
            started = chunk[0] === STARTED_BYTE;
            if (started) chunk = chunk.subarray(1);
          }
          stderr.push(chunk);
        },
      }),
    );

    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stop = new Promise<'timeout' | 'abort'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), options.timeoutMs);
      onAbort = () => resolve('abort');
      options.signal?.addEventListener('abort', onAbort, { once: true });
    });
    let outcome: number | null | 'timeout' | 'abort';
    try {
      outcome = await Promise.race([run.finished, stop]);
    } finally {
      clearTimeout(timer);
      if (onAbort !== undefined) options.signal?.removeEventListener('abort', onAbort);
    }
    const killed = outcome === 'timeout' || outcome === 'abort';
    if (killed) await this.killRun(name, mark, run);
    const result: ExecResult = {
      exitCode: killed ? null : outcome as number | null,
      stdout: stdout.text(),
      stderr: stderr.text(),
      truncated: stdout.truncated || stderr.truncated,
      timedOut: outcome === 'timeout',
      aborted: outcome === 'abort',
    };
    return { result, started };
  }

  /** Kills one command's session; if the output has not ended soon after, kills again, then drops it. */
  private async killRun(name: string, mark: string, run: ExecRun): Promise<void> {
    for (let attempt = 0; attempt < 2; attempt += 1) {
      try {
        // Through withRunning: a container paused meanwhile is unpaused before the kill exec.
        await this.deps.withRunning(name, () => this.runKill(name, killMarkedCmd([mark])));
      } catch (err) {
        if (isSandboxError(err, 'not_found')) return;
        throw err;
      }
      const ended = await Promise.race([run.finished.then(() => true), delay(DRAIN_AFTER_KILL_MS).then(() => false)]);
      if (ended) return;
    }
    this.deps.logger.warn({ sandbox: name, event: 'container_restart', cause: 'output_not_ended' }, 'command output did not end after kill, restarting the container');
    await this.deps.restart(name);
    const ended = await Promise.race([run.finished.then(() => true), delay(DRAIN_AFTER_KILL_MS).then(() => false)]);
    if (!ended) run.detach();
  }

  /** Runs a kill script; when it cannot start or does not confirm, restarts the container. */
  private async runKill(name: string, cmd: string[]): Promise<void> {
    let confirmed = false;
    try {
      const out = await withDeadline(this.runToEnd(name, cmd), KILL_DEADLINE_MS);
      confirmed = out !== undefined && out.stdout.includes(KILL_OK_MARKER);
    } catch (err) {
      if (isSandboxError(err, 'not_found')) throw err;
      this.deps.logger.warn({ sandbox: name, err }, 'kill exec failed');
    }
    if (!confirmed) {
      // Last resort: ends every process in the sandbox (files on volumes survive; /tmp is cleared).
      this.deps.logger.warn({ sandbox: name, event: 'container_restart', cause: 'kill_not_confirmed' }, 'kill could not run (pids limit?), restarting the container');
      await this.deps.restart(name);
    }
  }

  /** Runs a short helper command to completion and returns its output. */
  async runToEnd(name: string, cmd: string[], stdin?: Uint8Array, user = SANDBOX_USER): Promise<RunOutput> {
    const out = new OutputCapture(64 * 1024);
    const err = new OutputCapture(64 * 1024);
    const run = await this.deps.engine.startExec(name, {
      cmd,
      user,
      stdin,
      onOutput: (stream, chunk) => (stream === 'stdout' ? out : err).push(chunk),
    });
    const exitCode = await run.finished;
    return { exitCode, stdout: out.text(), stderr: err.text() };
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

async function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return Promise.race([promise, delay(ms).then(() => undefined)]);
}
