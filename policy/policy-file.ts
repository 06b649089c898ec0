/**
 * Policy files: JSON or YAML text, validated by zod. Reading the file is the caller's job (this
 * module stays free of I/O); every error names the source, the path inside it and the problem.
 */
import type * as Yaml from 'yaml';
import { z } from 'zod';
import { CodedError, requireCjs } from '../common/index.js';
import { DEFAULT_CONNECT_PORTS, type PolicyProblem } from './policy.js';

const yaml = requireCjs('yaml') as typeof Yaml;

const TunnelModeSchema = z
  .enum(['tls', 'opaque'])
  .describe('What a CONNECT tunnel to this host may carry: "tls" (a TLS ClientHello naming the host must come first) or "opaque" (any bytes, for SSH, plain WebSocket and other non-TLS protocols; trusts the host\'s virtual hosting).');

export const PolicyFileSchema = z.strictObject({
  version: z.literal(1).default(1).describe('Policy format version. Only 1 exists.'),
  allowHosts: z
    .array(
      z.union([
        z.string(),
        z.strictObject({
          host: z.string().describe('"example.com" or "*.example.com", as in the string form.'),
          tunnel: TunnelModeSchema.optional().describe('Default: "tls", or the --tunnel-default of the proxy.'),
        }),
      ]),
    )
    .describe('Host names that may be reached: "example.com" exactly, "*.example.com" any name below it; or { host, tunnel } to set the tunnel mode of that entry.'),
  connectPorts: z
    .array(z.number().int().min(1).max(65535))
    .min(1)
    .default([...DEFAULT_CONNECT_PORTS])
    .describe('Destination ports allowed for CONNECT and plain HTTP.'),
});

export type PolicyFile = z.infer<typeof PolicyFileSchema>;

export class PolicyError extends CodedError<'invalid_policy'> {
  readonly source: string;
  readonly problems: readonly PolicyProblem[];

  constructor(source: string, problems: readonly PolicyProblem[], options?: ErrorOptions) {
    const lines = problems.map((p) => `  ${p.path || '(top level)'}: ${p.message}`);
    super('invalid_policy', `invalid policy in ${source}:\n${lines.join('\n')}`, options);
    this.source = source;
    this.problems = problems;
  }
}

function zodPath(path: readonly PropertyKey[]): string {
  return path.map((k, i) => (typeof k === 'number' ? `[${k}]` : `${i === 0 ? '' : '.'}${String(k)}`)).join('');
}

/** Parses and validates policy text. `source` names it in errors (usually the file path). */
export function parsePolicyText(text: string, source: string): PolicyFile {
  // YAML 1.2 reads JSON too, and unlike JSON.parse it refuses duplicate keys, which would
  // otherwise let a later key silently override an earlier one.
  const doc = yaml.parseDocument(text, { uniqueKeys: true, prettyErrors: true });
  if (doc.errors.length > 0) {
    throw new PolicyError(
      source,
      doc.errors.map((e) => ({ path: e.linePos ? `line ${e.linePos[0].line}` : '', message: e.message.split('\n')[0] ?? e.code })),
    );
  }
  const result = PolicyFileSchema.safeParse(doc.toJS());
  if (!result.success) {
    throw new PolicyError(
      source,
      result.error.issues.map((issue) => ({ path: zodPath(issue.path), message: issue.message })),
    );
  }
  return result.data;
}
