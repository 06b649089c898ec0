/**
 * The options of `exec` as the controller accepts them: one zod schema checks what a caller
 * sent and is the source of the `ExecOptions` type. Unknown keys are refused (a misspelt
 * `timeout` would otherwise run the command under the 10-minute default). Command, env values and
 * cwd may hold any UTF-8 (they travel base64-encoded), but no NUL, which bash cannot carry.
 */
import { z } from 'zod';
import type { MaxLimits } from './config.js';
import { execEnvNameSchema } from './env-name.js';
import { SandboxError } from './errors.js';
import { describeIssues } from './input-issues.js';
import { SANDBOX_TAG_RE } from './names.js';

const DEFAULT_EXEC_TIMEOUT_MS = 10 * 60_000;
const DEFAULT_TAG = 'default';
/** Per output stream, when the caller names no cap (exec/output-capture.ts keeps that many bytes). */
const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;

/**
 * Receives a command's output as it arrives (ExecOptions.onOutput). A sink that cannot take more
 * at once (a slow pipe) returns a promise: no more of the command's output is read until it
 * settles, so the command waits on its full pipe instead of its output piling up in the caller.
 */
export type OutputSink = (stream: 'stdout' | 'stderr', chunk: Uint8Array) => unknown;

function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array> {
  return typeof v === 'object' && v !== null && typeof (v as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function';
}

const noNul = z.string().refine((s) => !s.includes('\0'), 'contains a NUL character, which bash cannot carry');

const execOptionsSchema = z.strictObject({
  /** Default 10 minutes (or the deployment's maxLimits.execTimeoutMs when lower); at most that. */
  timeoutMs: z.number().finite().positive().optional(),
  signal: z.instanceof(AbortSignal).optional(),
  cwd: noNul.optional(),
  env: z.record(execEnvNameSchema, noNul).default({}),
  /** Holder tag for `killTagged`. */
  tag: z
    .string()
    .regex(SANDBOX_TAG_RE, 'must be 1-64 ASCII letters, digits, "_", "." or "-", starting with a letter or digit')
    .default(DEFAULT_TAG),
  /** Cap per output stream; the cut backs up to a whole UTF-8 character. Default 1 MiB (or the ceiling when lower). */
  maxOutputBytes: z.number().int().nonnegative().optional(),
  /**
   * The command's stdin: bytes (a string as UTF-8), or a stream of chunks (an AsyncIterable of
   * Uint8Array, such as a Node Readable) passed on as they come; its end closes the command's
   * stdin. Without it the command's stdin is empty.
   */
  stdin: z.custom<Uint8Array | string | AsyncIterable<Uint8Array>>(
    (v) => typeof v === 'string' || v instanceof Uint8Array || isAsyncIterable(v),
    'must be bytes (a Uint8Array), a string, or a stream of bytes (an async iterable of Uint8Array)',
  ).optional(),
  /**
   * Called with each chunk of the command's output as it arrives (never a byte written before
   * the command began), all of it: nothing passed on is held, so only what is held until the
   * command begins is capped (maxOutputBytes per stream, and `truncated` says whether that cap
   * dropped any). The result's stdout and stderr are then empty, since the caller has had them.
   */
  onOutput: z.custom<OutputSink>((v) => typeof v === 'function', 'must be a function (stream, chunk)').optional(),
  /**
   * Runs the command on a terminal of its own (exec/exec-script.ts): its stdout and stderr are
   * one stream (stdout, with CRLF line ends), its stdin a terminal. `rows`/`cols` set the
   * terminal's size; `echo` turns the terminal's echo of input on (off by default).
   */
  tty: z.strictObject({
    rows: z.number().int().min(1).max(10_000).optional(),
    cols: z.number().int().min(1).max(10_000).optional(),
    echo: z.boolean().default(false),
  }).optional(),
  /**
   * End every process of the sandbox user (as `killAll`, other running commands included) before
   * the command starts, so nothing an earlier command left behind can write into its output or
   * kill it.
   */
  fresh: z.boolean().default(false),
});

export type ExecOptions = z.input<typeof execOptionsSchema>;
export type CheckedExecOptions = Omit<z.output<typeof execOptionsSchema>, 'timeoutMs' | 'maxOutputBytes'> & {
  readonly timeoutMs: number;
  readonly maxOutputBytes: number;
};
/** The deployment's bounds that apply to exec options. */
export type ExecCeilings = Pick<MaxLimits, 'execTimeoutMs' | 'outputBytes'>;

/** A caller's value, or the default (never above the deployment's ceiling), refused above it. */
function bounded(value: number | undefined, fallback: number, ceiling: number, what: string, key: string, unit: string): number {
  if (value === undefined) return Math.min(fallback, ceiling);
  if (value > ceiling) {
    throw new SandboxError('invalid_spec', `The exec options were refused: opts.${what} ${value} is above this deployment's maximum of ${ceiling} ${unit} (extensionConfig."sandbox-docker".maxLimits.${key}).`);
  }
  return value;
}

export function checkExecOptions(command: unknown, input: unknown, ceilings: ExecCeilings): { command: string; options: CheckedExecOptions } {
  const checkedCommand = noNul.safeParse(command);
  if (!checkedCommand.success) {
    throw new SandboxError('invalid_spec', `The command was refused: ${describeIssues(checkedCommand.error, 'command')}.`, { cause: checkedCommand.error });
  }
  const result = execOptionsSchema.safeParse(input ?? {});
  if (!result.success) {
    throw new SandboxError('invalid_spec', `The exec options were refused: ${describeIssues(result.error, 'opts')}.`, { cause: result.error });
  }
  const options: CheckedExecOptions = {
    ...result.data,
    timeoutMs: bounded(result.data.timeoutMs, DEFAULT_EXEC_TIMEOUT_MS, ceilings.execTimeoutMs, 'timeoutMs', 'execTimeoutMs', 'ms'),
    maxOutputBytes: bounded(result.data.maxOutputBytes, DEFAULT_MAX_OUTPUT_BYTES, ceilings.outputBytes, 'maxOutputBytes', 'outputBytes', 'bytes'),
  };
  return { command: checkedCommand.data, options };
}
