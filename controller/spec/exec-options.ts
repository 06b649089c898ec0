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
  stdin: z.union([z.instanceof(Uint8Array), z.string()]).optional(),
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
