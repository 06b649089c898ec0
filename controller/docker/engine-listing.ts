/**
 * Listing by label, for the operator CLI only: the socket proxy refuses these calls by design
 * (403), so they work only against the engine itself. Always filtered by labels (all must match).
 */
import { SandboxError } from '../spec/index.js';
import type { EngineCaller } from './engine-call.js';

export interface ContainerSummary {
  readonly id: string;
  readonly name: string;
  readonly image: string;
  readonly state: string;
  readonly status: string;
  readonly createdMs: number;
  readonly labels: Readonly<Record<string, string>>;
}

/** A listed network or volume (a volume's id is its name). */
export interface ResourceSummary {
  readonly id: string;
  readonly name: string;
  readonly createdMs: number;
  readonly labels: Readonly<Record<string, string>>;
}

export async function listContainers(engine: EngineCaller, labels: readonly string[]): Promise<ContainerSummary[]> {
  const rows = await engine.call<Array<{ Id: string; Names?: string[]; Image?: string; State?: string; Status?: string; Created?: number; Labels?: Record<string, string> | null }>>(
    'listing of containers', 'GET', '/containers/json', { query: { all: true, filters: labelFilter(labels) } },
  );
  return rows.map((c) => ({
    id: c.Id,
    name: (c.Names?.[0] ?? '').replace(/^\//, ''),
    image: c.Image ?? '',
    state: c.State ?? 'unknown',
    status: c.Status ?? '',
    createdMs: (c.Created ?? 0) * 1000,
    labels: c.Labels ?? {},
  }));
}

export async function listNetworks(engine: EngineCaller, labels: readonly string[]): Promise<ResourceSummary[]> {
  const rows = await engine.call<Array<{ Id: string; Name: string; Created?: string; Labels?: Record<string, string> | null }>>(
    'listing of networks', 'GET', '/networks', { query: { filters: labelFilter(labels) } },
  );
  return rows.map((n) => ({ id: n.Id, name: n.Name, createdMs: Date.parse(n.Created ?? '') || 0, labels: n.Labels ?? {} }));
}

export async function listVolumes(engine: EngineCaller, labels: readonly string[]): Promise<ResourceSummary[]> {
  const data = await engine.call<{ Volumes?: Array<{ Name: string; CreatedAt?: string; Labels?: Record<string, string> | null }> | null }>(
    'listing of volumes', 'GET', '/volumes', { query: { filters: labelFilter(labels) } },
  );
  return (data.Volumes ?? []).map((v) => ({ id: v.Name, name: v.Name, createdMs: Date.parse(v.CreatedAt ?? '') || 0, labels: v.Labels ?? {} }));
}

function labelFilter(labels: readonly string[]): string {
  if (labels.length === 0) throw new SandboxError('invalid_spec', 'A listing needs at least one label filter.');
  return JSON.stringify({ label: labels });
}
