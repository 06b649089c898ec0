/**
 * The values of a policy's secrets, read when the policy loads (start and every reload): from the
 * egress's own environment or a file (a Kubernetes Secret mount), never from the sandbox. Any
 * problem stops the load, so the old policy stays: the error names the binding
 * (`allowHosts[3].secrets[0]`) and the variable or file, and never the value or placeholder.
 * `env` and `readFile` are the only I/O, passed in, so a test or a reload runs this same code.
 */
import { createHash } from 'node:crypto';
import { isCodedError } from '../../common/index.js';
import { createSecretSet, PolicyError, type LoadedSecret, type PlacedBinding, type Policy, type PolicyProblem, type SecretSource } from '../../policy/index.js';

/** The variable of the egress's environment that holds the placeholder the workload was given for `name`. */
export function placeholderVariable(name: string): string {
  return `EGRESS_PLACEHOLDER_${name}`;
}

/** Shortest placeholder: a shorter one could turn up in a request by chance, and be refused for nothing. */
export const MIN_PLACEHOLDER_LENGTH = 16;

/** `sha256:` and 12 hex digits of the value's digest: names a value in logs without giving it away. */
export function fingerprint(value: string): string {
  return `sha256:${createHash('sha256').update(value, 'utf8').digest('hex').slice(0, 12)}`;
}

/** A file's content; larger than `maxBytes`, refused (the caller phrases the problem). */
export type ReadFile = (path: string, maxBytes: number) => string | Buffer;

/**
 * The most a secret's file may hold: 64 KiB. A token or password is under a kilobyte, and the
 * header that carries it to the upstream far under this; a larger file is the wrong one, and read
 * whole at every reload it would take the memory the proxy serves with.
 */
export const MAX_SECRET_BYTES = 64 * 1024;
export type Environment = Readonly<Record<string, string | undefined>>;

// Printable ASCII without spaces at either end: what a header value carries unchanged (RFC 9110
// §5.5 trims the ends, and a line break would end the field).
const PRINTABLE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

function describeSource(source: SecretSource): string {
  return source.kind === 'env' ? `the variable ${source.variable}` : `the file ${source.path}`;
}

/** The value from its source, or what is wrong with it (never the value itself). */
function readValue(source: SecretSource, env: Environment, readFile: ReadFile): string | { problem: string } {
  let value: string | undefined;
  if (source.kind === 'env') {
    value = env[source.variable];
    if (value === undefined) return { problem: `${describeSource(source)} is not set in the egress's environment` };
  } else {
    try {
      value = readFile(source.path, MAX_SECRET_BYTES).toString('utf8').replace(/\r?\n$/, '');
    } catch (err) {
      if (isCodedError(err, 'RegularFileError')) {
        const fix = err.code === 'file_too_large' ? ', the most a secret may hold (64 KiB): check that it is the file of the secret\'s value' : '; give the file of the secret\'s value';
        return { problem: `cannot read ${describeSource(source)}: ${err.message}${fix}` };
      }
      return { problem: `cannot read ${describeSource(source)} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})` };
    }
  }
  if (value === '') return { problem: `${describeSource(source)} is empty` };
  if (!PRINTABLE.test(value)) return { problem: `the value in ${describeSource(source)} holds a control character, a non-ASCII byte or a space at an end; a header could not carry it unchanged` };
  return value;
}

/** What is wrong with a placeholder, given its value. */
function placeholderProblem(variable: string, placeholder: string, value: string): string | undefined {
  if (!PRINTABLE.test(placeholder)) return `${variable} holds a control character, a non-ASCII byte or a space at an end`;
  if (placeholder.length < MIN_PLACEHOLDER_LENGTH) return `${variable} is shorter than ${MIN_PLACEHOLDER_LENGTH} characters, and could turn up in a request by chance`;
  if (placeholder.includes(value) || value.includes(placeholder)) return `${variable} is the secret's value, or holds it, or is held in it: the sandbox would hold the secret`;
  return undefined;
}

/** One secret loaded from its first binding; every binding of the name is checked (one with no header needs the placeholder). */
function loadOne(bindings: readonly PlacedBinding[], env: Environment, readFile: ReadFile, problems: PolicyProblem[]): LoadedSecret | undefined {
  const first = bindings[0]!;
  const { name, source } = first.binding;
  const value = readValue(source, env, readFile);
  if (typeof value !== 'string') {
    problems.push({ path: first.path, message: `${name}: ${value.problem}` });
    return undefined;
  }
  const variable = placeholderVariable(name);
  const placeholder = env[variable] === '' ? undefined : env[variable];
  if (placeholder !== undefined) {
    const bad = placeholderProblem(variable, placeholder, value);
    if (bad !== undefined) {
      problems.push({ path: first.path, message: `${name}: ${bad}` });
      return undefined;
    }
  } else {
    const unsendable = bindings.find((b) => b.binding.header === undefined);
    if (unsendable !== undefined) {
      problems.push({ path: unsendable.path, message: `${name} has no header and ${variable} is not set: with neither, the secret could never be sent; give it a header, or the placeholder` });
      return undefined;
    }
  }
  return { name, value, placeholder, fingerprint: fingerprint(value) };
}

/** Two secrets whose placeholders contain one another could not be told apart in a request. */
function overlaps(secrets: readonly LoadedSecret[], bindings: ReadonlyMap<string, readonly PlacedBinding[]>): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  for (const a of secrets) {
    for (const b of secrets) {
      if (a === b || a.placeholder === undefined || b.placeholder === undefined || !a.placeholder.includes(b.placeholder)) continue;
      problems.push({ path: bindings.get(a.name)![0]!.path, message: `${a.name}: its placeholder contains that of ${b.name}; give each secret a placeholder of its own` });
    }
  }
  return problems;
}

/**
 * The policy with its secrets' values and placeholders attached (`Policy.secrets`), or a
 * PolicyError from `source` naming every binding whose value or placeholder is wrong. A policy
 * that binds no secret is returned as it is.
 */
export function loadSecrets(policy: Policy, env: Environment, readFile: ReadFile, source = 'the policy'): Policy {
  if (policy.secretBindings.length === 0) return policy;
  const byName = new Map<string, PlacedBinding[]>();
  for (const placed of policy.secretBindings) byName.set(placed.binding.name, [...(byName.get(placed.binding.name) ?? []), placed]);
  const problems: PolicyProblem[] = [];
  const secrets = [...byName.values()].flatMap((bindings) => loadOne(bindings, env, readFile, problems) ?? []);
  problems.push(...overlaps(secrets, byName));
  if (problems.length > 0) throw new PolicyError(source, problems);
  return Object.freeze({ ...policy, secrets: createSecretSet(secrets) });
}
