/**
 * Unknown-field detection for Kubernetes manifests, on top of kubernetes-models' validators.
 * Those are compiled from the OpenAPI schemas, which (like the API server without strict field
 * validation) let unknown fields through: `securityContex:` would vanish silently, and with it
 * the hardening it meant. So each field of a manifest is probed in turn: its value is replaced by
 * one of another type, and a field the schema knows is reported at exactly that path; a field
 * that draws no error there is unknown. Pure: the validator is passed in.
 */

export interface SchemaError {
  readonly instancePath: string;
  readonly message?: string;
}

/** Validates one manifest; the errors, or none. */
export type ValidateManifest = (doc: unknown) => readonly SchemaError[];

/** RFC 6901 escaping, as ajv writes instancePath: "~" as "~0", "/" as "~1". */
function pointer(path: readonly (string | number)[]): string {
  return path.map((p) => `/${String(p).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

function fieldPaths(value: unknown, path: (string | number)[], out: (string | number)[][]): void {
  if (Array.isArray(value)) {
    value.forEach((item, i) => fieldPaths(item, [...path, i], out));
  } else if (value !== null && typeof value === 'object') {
    for (const [key, child] of Object.entries(value)) {
      out.push([...path, key]);
      fieldPaths(child, [...path, key], out);
    }
  }
}

function withValueAt(doc: unknown, path: readonly (string | number)[], value: unknown): unknown {
  const copy = structuredClone(doc) as Record<string | number, unknown>;
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  node[path[path.length - 1] as string | number] = value;
  return copy;
}

/** JSON pointers of every field the schema does not know. */
export function unknownFields(doc: unknown, validate: ValidateManifest): string[] {
  const paths: (string | number)[][] = [];
  fieldPaths(doc, [], paths);
  const unknown: string[] = [];
  for (const path of paths) {
    const original = path.reduce<unknown>((node, key) => (node as Record<string | number, unknown>)[key], doc);
    // A value of another type than the original: every typed field refuses it.
    const probe = typeof original === 'boolean' ? 'probe' : true;
    const at = pointer(path);
    if (!validate(withValueAt(doc, path, probe)).some((e) => e.instancePath === at)) unknown.push(at);
  }
  return unknown;
}
