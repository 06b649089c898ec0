/**
 * Running commands in a sandbox: `exec` with timeout, abort and output caps, and the kills
 * (one command, by tag, all). A kill that cannot even start (the pids limit is used up)
 * falls back to restarting the container, which ends every process in it. A kill of everything
 * is judged by a root check of what still runs, never by the kill script's own word. A sandbox
 * found at its process limit before a command could start is freed first (as killAll does) and
 * the command started once more. An exec that ended before the command began (no start byte) is
 * an error naming the cause, never the command's exit status, and whatever the wrapper printed
 * before the start byte is never part of a result.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { type ExecCeilings, type ExecResult, SandboxError, checkExecOptions, isSandboxError, type CheckedExecOptions } from '../spec/index.js';
import type { ExecRun, SandboxEngine } from '../docker/index.js';
import {
  BACKSTOP_GRACE_SECONDS,
  type CommandIsolation,
  KILL_OK_MARKER,
  MAX_COMMAND_SCRIPT_BYTES,
  MAX_INLINE_PAYLOAD,
  ROOT_USER,
  SANDBOX_USER,
  STARTED_BYTE,
  commandPayload,
  encodeArg,
  execMark,
  execMarkEnv,
  killAllCmd,
  killMarkedCmd,
  killTaggedCmd,
  parseSurvivors,
  stagedPayload,
  survivorsCmd,
  wrapperCmd,
} from './exec-script.js';
import { OutputCapture, StreamedOutput } from './output-capture.js';
import { callerStdin as toCallerStdin, execStdin, outputStream } from './exec-streams.js';
import { commandStartFailure, lateStartFailure, type StartFailure } from './sandbox-full.js';

/** Looks at a sandbox whose exec failed to start, and the time between them (withRoom). */
const CHANGE_LOOKS = 3;
const CHANGE_LOOK_MS = 300;

const KILL_DEADLINE_MS = 10_000;
/** Root checks after a kill of everything, and the pause between them, before a restart. */
const SURVIVOR_LOOKS = 3;
const SURVIVOR_LOOK_MS = 200;
/** What the wrapper may print before the start byte that is kept, for the error that names it. */
const PRE_START_BYTES = 4096;
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
  /** How commands are kept apart (exec-script.ts CommandIsolation). */
  readonly isolation: CommandIsolation;
}

/**
 * One try at a command; whether the command began (its shell wrote STARTED_BYTE), and what the
 * wrapper wrote to stderr before it (never part of the result).
 */
interface Attempt {
  readonly result: ExecResult;
  readonly started: boolean;
  readonly preStart: string;
  /** A timeout before the start: why, as judged when it came (and acted on: a restart if `full`). */
  readonly late?: StartFailure;
}

/**
 * Whether an attempt is no result at all: the command never began. An abort is the caller's
 * own result whenever it came; a timeout that came before the command began is not the
 * command's, and says why it could not begin when it can (a fork that found no room).
 */
function notStarted(a: Attempt): StartFailure | undefined {
  if (a.started || a.result.aborted) return undefined;
  if (a.result.timedOut) return a.late;
  return commandStartFailure(a.result.exitCode, a.result.stdout, a.preStart);
}

interface RunOutput {
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export class CommandRunner {
  constructor(private readonly deps: CommandDeps) {}

  async exec(name: string, rawCommand: unknown, rawOptions?: unknown): Promise<ExecResult> {
    const { command, options } = checkExecOptions(rawCommand, rawOptions, this.deps.ceilings);
    if (options.signal?.aborted === true) {
      return { exitCode: null, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: true };
    }
    const script = commandPayload(command, options.env, options.cwd, options.tty);
    const bytes = Buffer.byteLength(script, 'utf8');
    if (bytes > MAX_COMMAND_SCRIPT_BYTES) {
      throw new SandboxError('invalid_spec', `The command is ${bytes} bytes with its env exports and cd; the limit is ${MAX_COMMAND_SCRIPT_BYTES} (Linux refuses a longer argument with "Argument list too long"). Write a longer script to a file with writeFile and run that file.`);
    }
    // Ends what earlier commands left behind, before this one exists: a process of theirs could
    // otherwise stop or kill it, or (with commandIsolation off) write into its output.
    const restarted = options.fresh ? await this.killAll(name) : false;
    // Once the command began, the output is its own, whatever it says.
    const { result, restart } = await this.withRoom(name, () => this.execOnce(name, script, options), notStarted);
    return restarted || restart ? { ...result, restarted: true as const } : result;
  }

  /**
   * Ends every process of the sandbox user. The uid-1000 kill script does the killing; a root
   * check then judges it, and anything left alive, or no answer, restarts the container. Returns
   * whether it did.
   */
  async killAll(name: string): Promise<boolean> {
    return this.deps.withRunning(name, async () => {
      // A kill script that did not finish its work (a leftover killed or stopped it) restarts
      // the container whatever the root check then sees: the check judges, it does not excuse.
      const confirmed = await this.runKillScript(name, killAllCmd());
      const survivors = await this.survivors(name);
      if (confirmed && survivors !== undefined && survivors.length === 0) return false;
      const cause = !confirmed ? 'kill_not_confirmed' : survivors === undefined ? 'survivor_check_failed' : 'survivors_after_kill';
      this.deps.logger.warn(
        { sandbox: name, event: 'container_restart', cause, survivors: survivors?.slice(0, 20) },
        'processes of the sandbox user outlived the kill, restarting the container',
      );
      await this.deps.restart(name);
      return true;
    });
  }

  /**
   * The live processes not wholly root's, by a root exec (nothing uid 1000 runs can write its
   * output or stop it), looked at a few times a moment apart so that a process still dying of
   * the kill is not counted. Undefined when the check could not run.
   */
  private async survivors(name: string): Promise<number[] | undefined> {
    let last: number[] | undefined;
    for (let look = 0; look < SURVIVOR_LOOKS; look++) {
      if (look > 0) await new Promise((resolve) => setTimeout(resolve, SURVIVOR_LOOK_MS));
      const out = await withDeadline(this.runToEnd(name, survivorsCmd(), undefined, ROOT_USER), KILL_DEADLINE_MS).catch((err: unknown) => {
        if (isSandboxError(err, 'not_found')) throw err;
        this.deps.logger.warn({ sandbox: name, err }, 'survivor check failed');
        return undefined;
      });
      last = out?.exitCode === 0 ? parseSurvivors(out.stdout) : undefined;
      if (last === undefined || last.length === 0) return last;
    }
    return last;
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
   * cannot run) and tries once more, unless the attempt used up its time waiting (then the
   * sandbox is freed for the next call, and this one is `sandbox_full`). Still no room, or Docker
   * failing to start the exec for another reason, is an error that names the cause. `restart`
   * says whether freeing the sandbox restarted it.
   */
  async withRoom<R>(name: string, attempt: () => Promise<R>, failureOf: (r: R) => StartFailure | undefined): Promise<R & { restart: boolean }> {
    const first = await attempt();
    const failure = failureOf(first);
    if (failure === undefined) return { ...first, restart: false };
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
    if (failure.late === true) {
      // execOnce restarted the container already.
      throw new SandboxError('sandbox_full', `The command could not start in ${name}: ${failure.detail}. The container was restarted to end the sandbox's processes; run the command again.`);
    }
    this.deps.logger.warn({ sandbox: name, event: 'sandbox_full', detail: failure.detail }, 'sandbox at its process limit, ending its processes before the command');
    const restart = await this.killAll(name);
    const second = await attempt();
    const again = failureOf(second);
    if (again === undefined) return { ...second, restart };
    throw new SandboxError(
      again.kind === 'full' ? 'sandbox_full' : 'exec_failed',
      `The command could not start in ${name} even after its processes were ended (${again.detail}); destroy and create the sandbox again.`,
    );
  }

  private async execOnce(name: string, script: string, options: CheckedExecOptions): Promise<Attempt> {
    // Cancelled while the sandbox was freed for it (fresh, or a full sandbox's kill): never started.
    if (options.signal?.aborted === true) {
      return { result: { exitCode: null, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: true }, started: false, preStart: '' };
    }
    const mark = execMark(options.tag, randomUUID());
    const callerStdin = toCallerStdin(options.stdin);
    let payload = encodeArg(script);
    let staged: Buffer | undefined;
    if (payload.length > MAX_INLINE_PAYLOAD) {
      // Too large for an exec body: on stdin, ahead of the caller's own (nothing is staged in a
      // file the sandbox could fill or rewrite).
      staged = stagedPayload(script, mark);
      payload = `-${staged.length}`;
    }
    // A stream of the caller's is read only once the command began (execStdin): settled true at
    // the start byte, false when this attempt is over without it.
    let settleStart: (began: boolean) => void = () => undefined;
    const begun = new Promise<boolean>((resolve) => {
      settleStart = resolve;
    });
    const stdin = execStdin(staged, callerStdin, begun);
    const backstop = Math.ceil(options.timeoutMs / 1000) + BACKSTOP_GRACE_SECONDS;
    const stdout = outputStream('stdout', options.maxOutputBytes, options.onOutput);
    const stderr = outputStream('stderr', options.maxOutputBytes, options.onOutput);
    // Until the start byte, stderr is the wrapper's (bash's locale warnings, a fork retry): kept
    // apart, never in the result.
    const preStart = new OutputCapture(PRE_START_BYTES);
    let started = false;
    // Every wait is let go of once the command is to be killed: from then on none of the caller's
    // holds the connection, whose end the kill waits for (a reader that never drains would
    // otherwise turn every timeout and abort into a restart of the container). Each is also let go
    // of once it settles: a race against one promise that settles only at a
    // kill would leave a reaction on it per chunk, kept while the command runs (an async onOutput
    // returns a promise for every frame, and a command writing a byte at a time gets a frame per
    // byte: hundreds of bytes of heap each, with no cap).
    const waiting = new Set<() => void>();
    let stopping = false;
    const stopWaiting = (): void => {
      stopping = true;
      for (const letGo of waiting) letGo();
      waiting.clear();
    };
    const untilStopped = (wait: Promise<unknown>): Promise<void> | undefined => {
      if (stopping) return undefined;
      return new Promise<void>((resolve) => {
        const done = (): void => {
          waiting.delete(done);
          resolve();
        };
        waiting.add(done);
        wait.then(done, done);
      });
    };
    // One chunk of output to where it goes; what a caller's onOutput waits for, if anything.
    const take = (stream: 'stdout' | 'stderr', chunk: Buffer): Promise<unknown> | void => {
      if (stream === 'stdout') return stdout.push(chunk);
      if (!started) {
        const at = chunk.indexOf(STARTED_BYTE);
        if (at < 0) return preStart.push(chunk);
        preStart.push(chunk.subarray(0, at));
        started = true;
        settleStart(true);
        // The command's stdout may have come first (Docker reads the two pipes apart).
        const waits = [
          stdout instanceof StreamedOutput ? stdout.release() : undefined,
          stderr instanceof StreamedOutput ? stderr.release() : undefined,
          stderr.push(chunk.subarray(at + 1)),
        ].filter((w) => w !== undefined);
        return waits.length === 0 ? undefined : Promise.all(waits);
      }
      return stderr.push(chunk);
    };
    const run = await this.deps.withRunning(name, () =>
      this.deps.engine.startExec(name, {
        cmd: wrapperCmd(backstop, payload, this.deps.isolation, options.tty !== undefined),
        env: execMarkEnv(mark),
        user: SANDBOX_USER,
        stdin,
        // A caller's wait (a slow reader) is passed back: the exec's connection is not read until
        // it settles (engine-exec.ts), or until the kill.
        onOutput: (stream, chunk) => {
          const wait = take(stream, chunk);
          return wait instanceof Promise ? untilStopped(wait) : undefined;
        },
      }),
    );

    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stop = new Promise<'timeout' | 'abort'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), options.timeoutMs);
      onAbort = () => resolve('abort');
      // An abort while the exec was being started (or freed before it) fired no event here.
      if (options.signal?.aborted === true) resolve('abort');
      else options.signal?.addEventListener('abort', onAbort, { once: true });
    });
    let outcome: number | null | 'timeout' | 'abort';
    try {
      outcome = await Promise.race([run.finished, stop]);
    } catch (err) {
      // The engine could not say how the command ended (a failed look at the exec): it may run on,
      // so it is killed before the error is the caller's, not left to the backstop.
      stopWaiting();
      run.detach();
      await this.deps.withRunning(name, () => this.runKill(name, killMarkedCmd([mark]))).catch(() => undefined);
      throw err;
    } finally {
      settleStart(started);
      clearTimeout(timer);
      if (onAbort !== undefined) options.signal?.removeEventListener('abort', onAbort);
    }
    const killed = outcome === 'timeout' || outcome === 'abort';
    if (killed) {
      if (stdout instanceof StreamedOutput) stdout.stop();
      if (stderr instanceof StreamedOutput) stderr.stop();
      stopWaiting();
    }
    const late = outcome === 'timeout' && !started ? lateStartFailure(options.timeoutMs, preStart.text()) : undefined;
    if (late?.kind === 'full') {
      // The wrapper found no room to fork and the time is spent: a kill would need room too (and
      // seconds in a sandbox that a bomb keeps busy), so the restart that frees the sandbox for
      // the next call comes at once, and this call is sandbox_full (withRoom).
      run.detach();
      this.deps.logger.warn({ sandbox: name, event: 'container_restart', cause: 'sandbox_full' }, 'the command found no room to start before its timeout, restarting the container');
      await this.deps.restart(name);
    } else if (killed) {
      await this.killRun(name, mark, run);
    }
    const result: ExecResult = {
      exitCode: killed ? null : outcome as number | null,
      stdout: stdout.text(),
      stderr: stderr.text(),
      truncated: stdout.truncated || stderr.truncated,
      timedOut: outcome === 'timeout',
      aborted: outcome === 'abort',
    };
    return { result, started, preStart: preStart.text(), ...(late === undefined ? {} : { late }) };
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

  /**
   * Runs a kill script to its end (within a deadline) and returns whether it printed its OK
   * line. Under commandIsolation `landlock` no command's process can write that script's output
   * (it runs outside every command's domain), but one can stop it, so no OK line means not done.
   */
  private async runKillScript(name: string, cmd: string[]): Promise<boolean> {
    try {
      const out = await withDeadline(this.runToEnd(name, cmd), KILL_DEADLINE_MS);
      return out !== undefined && out.stdout.includes(KILL_OK_MARKER);
    } catch (err) {
      if (isSandboxError(err, 'not_found')) throw err;
      this.deps.logger.warn({ sandbox: name, err }, 'kill exec failed');
      return false;
    }
  }

  /** Runs a kill script; when it cannot start or does not confirm, restarts the container. */
  private async runKill(name: string, cmd: string[]): Promise<void> {
    const confirmed = await this.runKillScript(name, cmd);
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
