/**
 * Policy files: JSON or YAML text, validated by zod. Reading the file is the caller's job (this
 * module stays free of I/O); every error names the source, the path inside it and the problem.
 */
import type * as Yaml from 'yaml';
import { z } from 'zod';
import { CodedError, requireCjs } from '../common/index.js';
import { DEFAULT_CONNECT_PORTS, POLICY_MODES, type PolicyProblem } from './policy.js';

// Loaded with the first policy file: a proxy configured by its environment never needs it.
let yaml: typeof Yaml | undefined;

const TunnelModeSchema = z
  .enum(['tls', 'opaque'])
  .describe('What a CONNECT tunnel to this host may carry: "tls" (a TLS ClientHello naming the host must come first) or "opaque" (any bytes, for SSH, plain WebSocket and other non-TLS protocols; trusts the host\'s virtual hosting).');

const SecretSchema = z.strictObject({
  name: z.string().describe('[A-Z_][A-Z0-9_]*: the variable the workload finds its placeholder in (the egress reads it from EGRESS_PLACEHOLDER_<name>), and the default variable of the value.'),
  header: z.string().optional().describe('The header the proxy sets on every request to the host, replacing any the sandbox sent (Authorization, X-Api-Key); none: the placeholder is only swapped where the sandbox put it in a header.'),
  format: z.string().optional().describe('The header\'s value, "{}" standing for the secret ("Bearer {}"); default "{}".'),
  env: z.string().optional().describe('The egress\'s environment variable holding the value; default the name.'),
  file: z.string().optional().describe('Instead of env: an absolute path of a file holding the value (a Kubernetes Secret mount); one trailing newline is dropped.'),
});

export const PolicyFileSchema = z.strictObject({
  version: z.literal(1).default(1).describe('Policy format version. Only 1 exists.'),
  allowHosts: z
    .array(
      z.union([
        z.string(),
        z.strictObject({
          host: z.string().describe('"example.com" or "*.example.com", as in the string form.'),
          tunnel: TunnelModeSchema.optional().describe('Default: "tls", or the --tunnel-default of the proxy.'),
          methods: z
            .array(z.string())
            .optional()
            .describe('Plain-HTTP methods allowed to this host, in upper case ([GET, HEAD]); default every method. An entry with methods or paths allows no tunnel (CONNECT, transparent TLS).'),
          paths: z
            .array(z.string())
            .optional()
            .describe('Plain-HTTP paths allowed to this host: "/exact", or a prefix of whole segments "/repos/org/*"; compared after strict normalisation (policy/request-path.ts), the query never; default every path.'),
          inspect: z
            .boolean()
            .optional()
            .describe('true: the proxy terminates TLS to this host with a leaf of the deployment CA, opens its own verified TLS to the upstream, and reads every request (Host must be the server name; methods and paths apply inside). Default false: a tunnel it cannot read.'),
          secrets: z
            .array(SecretSchema)
            .optional()
            .describe('Secrets the proxy puts into requests to this host, which the sandbox holds only placeholders of. Only on an exact entry with inspect: true.'),
        }),
      ]),
    )
    .describe('Host names that may be reached: "example.com" exactly, "*.example.com" any name below it; or { host, tunnel, methods, paths, inspect } to set the tunnel mode, the method and path rules, or TLS inspection of that entry.'),
  connectPorts: z
    .array(z.number().int().min(1).max(65535))
    .min(1)
    .default([...DEFAULT_CONNECT_PORTS])
    .describe('Destination ports allowed for CONNECT and plain HTTP.'),
  mode: z
    .enum(POLICY_MODES)
    .optional()
    .describe('Default "enforce". "enforce" refuses hosts off allowHosts and ports off connectPorts; "report" allows them and logs would_deny, to learn an allowlist (IP literals and private addresses stay refused). Not a boundary: never leave it on.'),
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

/** "line L, column C" of an offset in the text. */
function at(lines: Yaml.LineCounter, offset: number): string {
  const { line, col } = lines.linePos(offset);
  return `line ${line}, column ${col}`;
}

/** What to write instead, for the YAML errors a policy's author meets. */
const YAML_HINTS: Partial<Record<Yaml.ErrorCode, string>> = {
  TAB_AS_INDENT: 'indent with spaces',
};

/**
 * A plain scalar that starts with `*` is an alias to YAML, so `- *.example.org` is not the
 * wildcard its author meant: each such node, with where it is and what to write.
 */
function aliasProblems(doc: Yaml.Document, lines: Yaml.LineCounter): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  yaml?.visit(doc, {
    Alias(_key, node) {
      const written = `*${node.source}`;
      problems.push({
        path: node.range ? at(lines, node.range[0]) : '',
        message: `${written} is read by YAML as an alias, not as a host name: quote entries that start with "*" ("${written}")`,
      });
    },
  });
  return problems;
}

/** Where the value at a zod path is in the text, when the document has it. */
function placeOf(doc: Yaml.Document, lines: Yaml.LineCounter, path: readonly PropertyKey[]): string {
  const node = doc.getIn(path.map((k) => (typeof k === 'symbol' ? String(k) : k)), true) as Yaml.Node | undefined;
  const range = yaml?.isNode(node) ? node.range : undefined;
  return range ? ` (${at(lines, range[0])})` : '';
}

/**
 * A value that fits no form of an allowHosts entry: zod says only "Invalid input". The form its
 * type chose (a string, or an object with host and tunnel) says what is wrong with it.
 */
function entryIssues(issue: z.core.$ZodIssue, value: unknown): { path: PropertyKey[]; message: string }[] {
  if (issue.code !== 'invalid_union' || issue.path[0] !== 'allowHosts') return [{ path: [...issue.path], message: issue.message }];
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return [{ path: [...issue.path], message: `${JSON.stringify(value)} is not an entry: write a host name ("example.com", "*.example.com") or { host: ..., tunnel: tls | opaque } or { host: ..., methods: [...], paths: [...] }` }];
  }
  // The union's second form is the object one, which an object value chose.
  const branch = issue.errors[1] ?? [];
  return branch.map((e) => ({ path: [...issue.path, ...e.path], message: e.message }));
}

/** The text as a YAML document, with the line counter its positions are read through. */
function readDocument(text: string): { doc: Yaml.Document; lines: Yaml.LineCounter } {
  // YAML 1.2 reads JSON too. Duplicate keys are refused by duplicateKeys, not by the reader's
  // uniqueKeys, which compares each key with every earlier one of its map: quadratic, so a file
  // of 60,000 keys held the event loop (every connection) for minutes on a reload.
  yaml ??= requireCjs('yaml') as typeof Yaml;
  const lines = new yaml.LineCounter();
  return { doc: yaml.parseDocument(text, { uniqueKeys: false, prettyErrors: false, lineCounter: lines }), lines };
}

/** The tag of a YAML merge key, in whatever spelling the file gave it (`!!merge`, verbatim, a %TAG handle). */
const MERGE_TAG = 'tag:yaml.org,2002:merge';

/**
 * Keys given twice in one map (a later one would silently override the earlier), merge keys, and
 * keys that are not scalars (no policy has one), in one pass over each map. The reader merges a
 * key tagged !!merge under YAML 1.2 too, keeping the map's own value of a key the merged map also
 * gives: one value dropped unsaid, as under a %YAML 1.1 directive.
 */
function duplicateKeys(doc: Yaml.Document, lines: Yaml.LineCounter): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  const place = (node: unknown): string => (yaml?.isNode(node) && node.range ? at(lines, node.range[0]) : '');
  yaml?.visit(doc, {
    Map(_key, map) {
      const seen = new Map<unknown, unknown>();
      for (const pair of map.items) {
        if (!yaml?.isScalar(pair.key)) {
          problems.push({ path: place(pair.key), message: 'a key must be a name, not a collection' });
          continue;
        }
        if (pair.key.tag === MERGE_TAG || typeof pair.key.value === 'symbol') {
          problems.push({ path: place(pair.key), message: 'a merge key ("<<" tagged !!merge), which drops unsaid the values it gives twice: write each key out' });
          continue;
        }
        const earlier = seen.get(pair.key.value);
        if (earlier !== undefined) problems.push({ path: place(pair.key), message: `duplicate key ${JSON.stringify(String(pair.key.value))}, given before at ${place(earlier)}: give each key once` });
        else seen.set(pair.key.value, pair.key);
      }
    },
  });
  return problems;
}

/**
 * The value of JSON or YAML text, read strictly (a duplicate key or a YAML alias is an error);
 * with the document, for placing later problems.
 */
export function readStrictText(text: string, source: string): { value: unknown; doc: Yaml.Document; lines: Yaml.LineCounter } {
  const { doc, lines } = readDocument(text);
  if (doc.errors.length > 0) {
    throw new PolicyError(
      source,
      doc.errors.map((e) => {
        const hint = YAML_HINTS[e.code];
        return { path: at(lines, e.pos[0]), message: `${e.message}${hint === undefined ? '' : `: ${hint}`}` };
      }),
    );
  }
  // A %YAML 1.1 directive turns on merge keys ("<<", which may give a key twice, one value
  // dropped unsaid) and 1.1's readings of yes/no, octal and sexagesimal numbers.
  if (doc.directives?.yaml.version !== '1.2') {
    throw new PolicyError(source, [{ path: at(lines, 0), message: `policies are YAML 1.2 (or JSON); drop the %YAML ${doc.directives?.yaml.version ?? ''} directive, under which merge keys ("<<") and yes, no, octal and sexagesimal numbers read otherwise` }]);
  }
  const aliases = aliasProblems(doc, lines);
  if (aliases.length > 0) throw new PolicyError(source, aliases);
  const duplicates = duplicateKeys(doc, lines);
  if (duplicates.length > 0) throw new PolicyError(source, duplicates);
  return { value: doc.toJS() as unknown, doc, lines };
}

/** Parses and validates policy text. `source` names it in errors (usually the file path). */
export function parsePolicyText(text: string, source: string): PolicyFile {
  const { value, doc, lines } = readStrictText(text, source);
  const result = PolicyFileSchema.safeParse(value);
  if (!result.success) {
    const entries = (value as { allowHosts?: unknown } | null)?.allowHosts;
    throw new PolicyError(
      source,
      result.error.issues.flatMap((issue) => {
        const entry = Array.isArray(entries) && typeof issue.path[1] === 'number' ? entries[issue.path[1]] : undefined;
        return entryIssues(issue, entry).map((i) => ({ path: i.path.length === 0 ? '' : `${zodPath(i.path)}${placeOf(doc, lines, i.path)}`, message: i.message }));
      }),
    );
  }
  return result.data;
}

/**
 * The problems found in a file's values after it parsed (buildPolicy's), each placed in its text:
 * `allowHosts[3]` gets the line and column of that entry.
 */
export function placeProblems(text: string, problems: readonly PolicyProblem[]): PolicyProblem[] {
  const { doc, lines } = readDocument(text);
  return problems.map((p) => {
    const path = [...p.path.matchAll(/([A-Za-z]+)|\[(\d+)\]/g)].map((m) => (m[2] === undefined ? m[1] ?? '' : Number(m[2])));
    return { path: `${p.path}${placeOf(doc, lines, path)}`, message: p.message };
  });
}
