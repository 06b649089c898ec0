/**
 * Running commands in a sandbox: `exec` with timeout, abort and output caps, and the kills
 * (one command, by tag, all). A kill that cannot even start (the pids limit is used up)
 * falls back to restarting the container, which ends every process in it.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { ExecOptions, ExecResult } from './contract.js';
import type { DockerEngine, ExecRun } from './engine.js';
import { SandboxError } from './errors.js';
import {
  BACKSTOP_GRACE_SECONDS,
  KILL_OK_MARKER,
  MAX_INLINE_PAYLOAD,
  SANDBOX_USER,
  commandPayload,
  controlFile,
  encodeArg,
  killAllCmd,
  killFilesCmd,
  killTaggedCmd,
  stageCmd,
  wrapperCmd,
} from './exec-script.js';
import { DEFAULT_MAX_OUTPUT_BYTES, OutputCapture } from './output-capture.js';
import { checkTag } from './names.js';

const DEFAULT_EXEC_TIMEOUT_MS = 10 * 60_000;
const DEFAULT_TAG = 'default';
const KILL_DEADLINE_MS = 10_000;
/** After a kill, how long the output stream may take to end before it is dropped. */
const DRAIN_AFTER_KILL_MS = 5_000;
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Runs `fn` on a running container; starts it first and retries once on a 409. */
export type WithRunning = <T>(name: string, fn: () => Promise<T>) => Promise<T>;

export interface CommandDeps {
  readonly engine: DockerEngine;
  readonly withRunning: WithRunning;
  readonly logger: Logger;
}

function noNul(value: string, where: string): string {
  if (value.includes('\0')) throw new SandboxError('invalid_spec', `${where} contains a NUL character, which bash cannot carry.`);
  return value;
}

function toBytes(data: Uint8Array | string): Uint8Array {
  return typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
}

interface CheckedExec {
  timeoutMs: number;
  maxOutputBytes: number;
  tag: string;
  env: Record<string, string>;
  cwd: string | undefined;
  stdin: Uint8Array | undefined;
}

function checkExecOptions(command: string, opts: ExecOptions): CheckedExec {
  if (typeof command !== 'string') throw new SandboxError('invalid_spec', 'The command must be a string.');
  noNul(command, 'The command');
  const timeoutMs = opts.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new SandboxError('invalid_spec', `timeoutMs must be a positive number, got ${String(opts.timeoutMs)}.`);
  const maxOutputBytes = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  if (!Number.isInteger(maxOutputBytes) || maxOutputBytes < 0) throw new SandboxError('invalid_spec', `maxOutputBytes must be a whole number >= 0, got ${String(opts.maxOutputBytes)}.`);
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(opts.env ?? {})) {
    if (!ENV_NAME_RE.test(key)) throw new SandboxError('invalid_spec', `env name ${JSON.stringify(key)} is not a valid variable name.`);
    if (typeof value !== 'string') throw new SandboxError('invalid_spec', `env.${key} must be a string.`);
    env[key] = noNul(value, `env.${key}`);
  }
  const cwd = opts.cwd === undefined ? undefined : noNul(opts.cwd, 'cwd');
  return {
    timeoutMs,
    maxOutputBytes,
    tag: checkTag(opts.tag ?? DEFAULT_TAG),
    env,
    cwd,
    stdin: opts.stdin === undefined ? undefined : toBytes(opts.stdin),
  };
}

export class CommandRunner {
  constructor(private readonly deps: CommandDeps) {}

  async exec(name: string, command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const checked = checkExecOptions(command, opts);
    if (opts.signal?.aborted === true) {
      return { exitCode: null, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: true };
    }
    const uuid = randomUUID();
    const ctl = controlFile(checked.tag, uuid);
    const encoded = encodeArg(commandPayload(command, checked.env, checked.cwd));
    let payload = encoded;
    if (encoded.length > MAX_INLINE_PAYLOAD) {
      // Too large for an exec body: stage the script through stdin first.
      const staged = `/tmp/.capybara-cmd-${uuid}`;
      const stagedRun = await this.deps.withRunning(name, () =>
        this.runToEnd(name, stageCmd(staged), Buffer.from(commandPayload(command, checked.env, checked.cwd))));
      if (stagedRun.exitCode !== 0) {
        throw new SandboxError('invalid_spec', `The command is too large to pass inline and could not be staged in /tmp (${stagedRun.stderr.trim() || `exit ${String(stagedRun.exitCode)}`}).`);
      }
      payload = `@${staged}`;
    }
    const backstop = Math.ceil(checked.timeoutMs / 1000) + BACKSTOP_GRACE_SECONDS;
    const stdout = new OutputCapture(checked.maxOutputBytes);
    const stderr = new OutputCapture(checked.maxOutputBytes);
    const run = await this.deps.withRunning(name, () =>
      this.deps.engine.startExec(name, {
        cmd: wrapperCmd(ctl, backstop, payload),
        user: SANDBOX_USER,
        stdin: checked.stdin,
        onOutput: (stream, chunk) => (stream === 'stdout' ? stdout : stderr).push(chunk),
      }),
    );

    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stop = new Promise<'timeout' | 'abort'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), checked.timeoutMs);
      onAbort = () => resolve('abort');
      opts.signal?.addEventListener('abort', onAbort, { once: true });
    });
    let outcome: number | null | 'timeout' | 'abort';
    try {
      outcome = await Promise.race([run.finished, stop]);
    } finally {
      clearTimeout(timer);
      if (onAbort !== undefined) opts.signal?.removeEventListener('abort', onAbort);
    }
    if (outcome === 'timeout' || outcome === 'abort') {
      await this.killRun(name, ctl, run);
      return {
        exitCode: null,
        stdout: stdout.text(),
        stderr: stderr.text(),
        truncated: stdout.truncated || stderr.truncated,
        timedOut: outcome === 'timeout',
        aborted: outcome === 'abort',
      };
    }
    return {
      exitCode: outcome,
      stdout: stdout.text(),
      stderr: stderr.text(),
      truncated: stdout.truncated || stderr.truncated,
      timedOut: false,
      aborted: false,
    };
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

  /** Kills one command's session; if the output has not ended soon after, kills again, then drops it. */
  private async killRun(name: string, ctl: string, run: ExecRun): Promise<void> {
    for (let attempt = 0; attempt < 2; attempt += 1) {
      try {
        // Through withRunning: a container paused meanwhile is unpaused before the kill exec.
        await this.deps.withRunning(name, () => this.runKill(name, killFilesCmd([ctl])));
      } catch (err) {
        if (err instanceof SandboxError && err.code === 'not_found') return;
        throw err;
      }
      const ended = await Promise.race([run.finished.then(() => true), delay(DRAIN_AFTER_KILL_MS).then(() => false)]);
      if (ended) return;
    }
    this.deps.logger.warn({ sandbox: name }, 'command output did not end after kill, restarting the container');
    await this.deps.engine.restartContainer(name);
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
      if (err instanceof SandboxError && err.code === 'not_found') throw err;
      this.deps.logger.warn({ sandbox: name, err }, 'kill exec failed');
    }
    if (!confirmed) {
      // Last resort: ends every process in the sandbox (files on volumes survive; /tmp is cleared).
      this.deps.logger.warn({ sandbox: name }, 'kill could not run (pids limit?), restarting the container');
      await this.deps.engine.restartContainer(name);
    }
  }

  /** Runs a short helper command to completion and returns its output. */
  async runToEnd(name: string, cmd: string[], stdin?: Uint8Array, user = SANDBOX_USER): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
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
