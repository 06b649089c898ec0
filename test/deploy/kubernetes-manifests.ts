/**
 * The Kubernetes manifests of deploy/kubernetes/ as data, for the kubernetes*.test.ts files: the
 * plain files (the ones the base's kustomization.yaml lists), a kustomize render of a directory,
 * and the offline schema check of one object (kubernetes-models, generated from the Kubernetes
 * OpenAPI schemas, plus the strict unknown-field probe of k8s-strict.ts).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse, parseAllDocuments } from 'yaml';
import { unknownFields, type SchemaError, type ValidateManifest } from './k8s-strict.js';

export type Manifest = Record<string, any>;

export const BASE_DIR = fileURLToPath(new URL('../../deploy/kubernetes', import.meta.url));
export const OVERLAY_DIR = fileURLToPath(new URL('../../deploy/kubernetes-overlays/example', import.meta.url));

/** The kubernetes-models module of each apiVersion used here. */
const MODEL_MODULES: Record<string, string> = {
  v1: 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
  'policy/v1': 'kubernetes-models/policy/v1',
};

export async function validatorFor(doc: Manifest): Promise<ValidateManifest> {
  const modulePath = MODEL_MODULES[doc.apiVersion];
  if (modulePath === undefined) throw new Error(`no model module for apiVersion ${doc.apiVersion}`);
  const Model = (await import(modulePath))[doc.kind] as (new (data: unknown) => { validate(): void }) | undefined;
  if (Model === undefined) throw new Error(`kubernetes-models has no ${doc.apiVersion} ${doc.kind}`);
  return (data) => {
    try {
      new Model(data).validate();
      return [];
    } catch (err) {
      return (err as { errors?: SchemaError[] }).errors ?? [{ instancePath: '', message: (err as Error).message }];
    }
  };
}

/** What the schemas say of one object: its schema errors and its unknown fields, none when it is valid. */
export async function schemaProblems(doc: Manifest): Promise<{ errors: readonly SchemaError[]; unknown: string[] }> {
  const validate = await validatorFor(doc);
  return { errors: validate(doc), unknown: unknownFields(doc, validate) };
}

function parseDocuments(text: string, source: string): Manifest[] {
  return parseAllDocuments(text).map((d) => {
    if (d.errors.length > 0) throw new Error(`${source}: ${d.errors[0]?.message}`);
    return d.toJS() as Manifest;
  }).filter((doc) => doc !== null);
}

/** The files the base's kustomization.yaml lists, in that order. */
export function baseFiles(): string[] {
  const kustomization = parse(readFileSync(join(BASE_DIR, 'kustomization.yaml'), 'utf8')) as { resources?: unknown };
  if (!Array.isArray(kustomization.resources)) throw new Error('deploy/kubernetes/kustomization.yaml lists no resources');
  return kustomization.resources as string[];
}

/** Every object of the plain manifest files, with the file it is in. */
export function plainManifests(): Array<{ file: string; doc: Manifest }> {
  return baseFiles().flatMap((file) => parseDocuments(readFileSync(join(BASE_DIR, file), 'utf8'), file).map((doc) => ({ file, doc })));
}

/** `kubectl kustomize DIR`, parsed. Rejects with kubectl's message when it fails. */
export async function kustomize(dir: string): Promise<Manifest[]> {
  const { stdout } = await promisify(execFile)('kubectl', ['kustomize', dir], { encoding: 'utf8', maxBuffer: 16 << 20 });
  return parseDocuments(stdout, `kubectl kustomize ${dir}`);
}

/** kind/namespace/name: what identifies an object in a cluster. */
export function objectKey(doc: Manifest): string {
  return `${doc.kind}/${doc.metadata?.namespace ?? ''}/${doc.metadata?.name}`;
}

/** The one object of `kind` named `name`; throws when there is none. */
export function findIn(docs: readonly Manifest[], kind: string, name: string): Manifest {
  const hit = docs.find((d) => d.kind === kind && d.metadata?.name === name);
  if (hit === undefined) throw new Error(`no ${kind} ${name} among the manifests`);
  return hit;
}
