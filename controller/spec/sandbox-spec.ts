/**
 * The sandbox spec as the controller accepts it: one zod schema is both the check of what a
 * caller sent and the source of the `SandboxSpec` type. It refuses at the edge, before any engine
 * call, everything that does not depend on the deployment (wrong types, unknown keys, bad names,
 * allowlist entries the egress proxy would refuse); sandbox-plan.ts then applies the deployment.
 */
import { z } from 'zod';
import { parseHostPattern } from '../../policy/index.js';
import { containerEnvNameSchema, containerEnvValueProblem } from './env-name.js';
import { SandboxError } from './errors.js';
import { describeIssues } from './input-issues.js';
import { PRINTABLE_ASCII } from './ascii-body.js';

const ASCII_HINT = 'must be printable ASCII (Docker create bodies are ASCII: write host names in punycode, keep image names, env values and labels ASCII)';

/**
 * An allowlist entry judged by policy/, the parser the egress proxy itself uses, so the
 * controller never starts a proxy that would refuse its allowlist (and exit, leaving the sandbox
 * without egress): IP literals in any spelling, wildcards over public suffixes (`*.com`) and
 * malformed names are refused here, naming the entry and the reason. Kept as the proxy writes it.
 */
export const allowHostSchema = z.string().transform((entry, ctx) => {
  if (!PRINTABLE_ASCII.test(entry)) {
    ctx.addIssue({ code: 'custom', message: `${JSON.stringify(entry)} ${ASCII_HINT}` });
    return z.NEVER;
  }
  const parsed = parseHostPattern(entry);
  if (!parsed.ok) {
    ctx.addIssue({ code: 'custom', message: `${JSON.stringify(entry)} is not allowed: ${parsed.problem}` });
    return z.NEVER;
  }
  return parsed.pattern.entry;
});

const positive = z.number().finite().positive();

/** The tier names; what each one means is spec/tiers.ts. */
const egressTierSchema = z.enum(['none', 'internal', 'allowlist', 'open']);
/** Every tier, in the schema's order (the operator CLI's list of `--egress` values). */
export const EGRESS_TIER_NAMES = egressTierSchema.options;
/** The tier of a spec that names none. */
export const DEFAULT_EGRESS_TIER = 'allowlist' satisfies EgressTier;

const sandboxLimitsSchema = z.strictObject({
  /** CPUs (fractions allowed). */
  cpu: positive.optional(),
  memoryMb: positive.int('must be a whole number of MiB').optional(),
  diskMb: positive.int('must be a whole number of MiB').optional(),
  egress: egressTierSchema.default(DEFAULT_EGRESS_TIER),
  /** Host names (punycode) the allowlist tier may reach; `*.example.com` for subdomains. */
  allowHosts: z.array(allowHostSchema).optional(),
});

const sandboxWorkspaceSchema = z.strictObject({
  key: z.string(),
  /** Default `ephemeral`. A persistent workspace survives `destroy`. */
  durability: z.enum(['ephemeral', 'persistent']).default('ephemeral'),
});

const sandboxSpecSchema = z.strictObject({
  /** Conversation id; the resource name is `cap-${id}` (checked by names.ts). */
  id: z.string(),
  image: z.string().min(1, 'must be a non-empty image reference').regex(PRINTABLE_ASCII, ASCII_HINT),
  limits: sandboxLimitsSchema,
  env: z
    .record(containerEnvNameSchema, z.string().regex(PRINTABLE_ASCII, ASCII_HINT))
    .superRefine((env, ctx) => {
      for (const [name, value] of Object.entries(env)) {
        const problem = containerEnvValueProblem(name, value);
        if (problem !== undefined) ctx.addIssue({ code: 'custom', path: [name], message: problem });
      }
    })
    .optional(),
  workspace: sandboxWorkspaceSchema.optional(),
});

export type EgressTier = z.infer<typeof egressTierSchema>;
export type SandboxLimits = z.input<typeof sandboxLimitsSchema>;
export type SandboxWorkspace = z.input<typeof sandboxWorkspaceSchema>;
export type SandboxSpec = z.input<typeof sandboxSpecSchema>;
export type CheckedSandboxSpec = z.output<typeof sandboxSpecSchema>;

/**
 * Validates a spec. An unknown key under `limits` is a limit this controller cannot enforce
 * (`limit_not_expressible`: never dropped silently); every other problem is `invalid_spec`.
 */
export function checkSandboxSpec(input: unknown): CheckedSandboxSpec {
  const result = sandboxSpecSchema.safeParse(input);
  if (result.success) return result.data;
  const unknownLimit = result.error.issues.some((i) => i.code === 'unrecognized_keys' && i.path.length === 1 && i.path[0] === 'limits');
  const code = unknownLimit ? 'limit_not_expressible' : 'invalid_spec';
  throw new SandboxError(code, `The sandbox spec was refused: ${describeIssues(result.error, 'spec')}.`, { cause: result.error });
}

/** A live allowlist change (`changeAllowHosts`): the hosts to add and to drop. */
const allowlistChangeSchema = z.strictObject({
  allow: z.array(allowHostSchema).max(1_000).optional(),
  deny: z.array(allowHostSchema).max(1_000).optional(),
});

export type AllowlistChange = z.input<typeof allowlistChangeSchema>;

/** Validates a change with the create's own entry checks: `invalid_spec` names the entry and why. */
export function checkAllowlistChange(input: unknown): z.output<typeof allowlistChangeSchema> {
  const result = allowlistChangeSchema.safeParse(input);
  if (result.success) return result.data;
  throw new SandboxError('invalid_spec', `The allowlist change was refused: ${describeIssues(result.error, 'change')}.`, { cause: result.error });
}
