/**
 * `inspect NAME`: one sandbox as the controller sees it, read with per-name calls only, so it
 * works through the socket proxy too.
 */
import type { DockerEngine } from '../docker/index.js';
import { SandboxError, LABEL_ALLOW_HOSTS, LABEL_EGRESS, checkSandboxName, meaningOfLabel, namesFor } from '../spec/index.js';
import { decodeAllowHosts } from '../../common/index.js';

export interface SandboxDetail {
  readonly name: string;
  readonly state: string;
  readonly tier: string;
  readonly image: string;
  readonly allowHosts: readonly string[];
  readonly runtime: string;
  readonly egress: string;
  readonly network: string;
  readonly volumes: readonly string[];
  readonly limits: { readonly nanoCpus: unknown; readonly memory: unknown; readonly pidsLimit: unknown };
}

export async function inspectSandbox(engine: DockerEngine, rawName: string): Promise<SandboxDetail> {
  const name = checkSandboxName(rawName);
  const names = namesFor(name);
  const view = await engine.inspectContainer(name);
  if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist (no container of that name); gc removes leftovers.`);
  const tier = view.labels[LABEL_EGRESS] ?? 'unknown';
  const meaning = meaningOfLabel(view.labels[LABEL_EGRESS]);
  const egress = meaning.egressProxy ? ((await engine.inspectContainer(names.egress))?.status ?? 'missing') : 'none';
  const hasNetwork = meaning.sandboxNetwork === 'internal';
  const mounts = Array.isArray(view.hostConfig.Mounts) ? (view.hostConfig.Mounts as Array<{ Type?: string; Source?: string }>) : [];
  return {
    name,
    state: view.paused ? 'paused' : view.status,
    tier,
    image: view.image,
    allowHosts: decodeAllowHosts(view.labels[LABEL_ALLOW_HOSTS] ?? ''),
    runtime: String(view.hostConfig.Runtime ?? ''),
    egress,
    network: hasNetwork ? ((await engine.inspectNetwork(names.network)) !== undefined ? names.network : `${names.network} (missing)`) : 'none',
    volumes: mounts.filter((m) => m.Type === 'volume' && typeof m.Source === 'string').map((m) => m.Source as string),
    limits: { nanoCpus: view.hostConfig.NanoCpus, memory: view.hostConfig.Memory, pidsLimit: view.hostConfig.PidsLimit },
  };
}
