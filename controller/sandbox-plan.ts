/**
 * Validates a `SandboxSpec` against the deployment config and resolves it into a plan: every
 * name, label, limit and network decision needed to build the Docker bodies. Pure; everything
 * that can be refused is refused here, before any engine call.
 */
import type { DeploymentConfig } from './config.js';
import type { EgressTier, SandboxSpec } from './contract.js';
import { requirePrintableAscii } from './ascii-body.js';
import { SandboxError } from './errors.js';
import { dockerLimits, type DockerLimits } from './limits.js';
import {
  LABEL_ALLOW_HOSTS,
  LABEL_EGRESS,
  LABEL_WORKSPACE_KEY,
  LABEL_SANDBOX,
  namesFor,
  persistentWorkspaceVolume,
  sandboxLabels,
  sandboxNameForId,
  type SandboxNames,
} from './names.js';

const EGRESS_TIERS: readonly EgressTier[] = ['none', 'internal', 'allowlist', 'open'];
/** An allowlist entry as the proxy accepts it: punycode labels, optionally `*.` in front. */
const ALLOW_HOST_RE = /^(\*\.)?[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$/;
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const EGRESS_PROXY_PORT = 3128;

export interface SandboxPlan {
  readonly names: SandboxNames;
  readonly image: string;
  readonly tier: EgressTier;
  readonly allowHosts: readonly string[];
  readonly limits: DockerLimits;
  readonly env: Readonly<Record<string, string>>;
  /** Labels of every per-sandbox resource. */
  readonly labels: Readonly<Record<string, string>>;
  /** Labels of the sandbox container: also the tier and allowlist for `resume`. */
  readonly containerLabels: Readonly<Record<string, string>>;
  readonly workspaceVolume: string;
  readonly persistentWorkspace: { readonly key: string; readonly labels: Readonly<Record<string, string>> } | undefined;
  readonly runtime: 'runc' | 'runsc';
  readonly sharedNetwork: string;
  readonly egressProxyImage: string;
  readonly volumeDriver: string | undefined;
}

export interface PlanOptions {
  readonly extraLabels: Readonly<Record<string, string>>;
}

function checkEnv(env: Record<string, string> | undefined, where: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (env === undefined) return out;
  if (typeof env !== 'object' || env === null) throw new SandboxError('invalid_spec', `${where} must be an object of strings.`);
  for (const [key, value] of Object.entries(env)) {
    if (!ENV_NAME_RE.test(key)) {
      throw new SandboxError('invalid_spec', `${where} name ${JSON.stringify(key)} is not a valid variable name (letters, digits, "_", not starting with a digit).`);
    }
    if (typeof value !== 'string') throw new SandboxError('invalid_spec', `${where}.${key} must be a string.`);
    out[key] = requirePrintableAscii(value, `${where}.${key}`);
  }
  return out;
}

function checkAllowHosts(hosts: readonly string[] | undefined): string[] {
  if (hosts === undefined) return [];
  if (!Array.isArray(hosts)) throw new SandboxError('invalid_spec', 'limits.allowHosts must be an array of host names.');
  return hosts.map((host, i) => {
    if (typeof host !== 'string') throw new SandboxError('invalid_spec', `limits.allowHosts[${i}] must be a string.`);
    requirePrintableAscii(host, `limits.allowHosts[${i}] (${JSON.stringify(host)})`);
    if (host.length > 253 || !ALLOW_HOST_RE.test(host)) {
      throw new SandboxError('invalid_spec', `limits.allowHosts[${i}] ${JSON.stringify(host)} is not a host name or *.suffix pattern.`);
    }
    return host.toLowerCase();
  });
}

/** Labels record the allowlist as a comma list; decodes what `planSandbox` wrote. */
export function allowHostsFromLabel(value: string | undefined): string[] {
  return value === undefined || value === '' ? [] : value.split(',');
}

export function planSandbox(spec: SandboxSpec, config: DeploymentConfig, options: PlanOptions): SandboxPlan {
  if (typeof spec !== 'object' || spec === null) throw new SandboxError('invalid_spec', 'The sandbox spec must be an object.');
  const name = sandboxNameForId(spec.id);
  if (typeof spec.image !== 'string' || spec.image.length === 0) {
    throw new SandboxError('invalid_spec', 'spec.image must be a non-empty image reference.');
  }
  const image = requirePrintableAscii(spec.image, 'spec.image');
  if (typeof spec.limits !== 'object' || spec.limits === null) throw new SandboxError('invalid_spec', 'spec.limits is required.');
  const tier = spec.limits.egress ?? 'allowlist';
  if (!EGRESS_TIERS.includes(tier)) {
    throw new SandboxError('invalid_spec', `limits.egress ${JSON.stringify(tier)} is not one of ${EGRESS_TIERS.join(', ')}.`);
  }
  if (tier === 'open' && !config.allowOpenEgress) {
    throw new SandboxError(
      'open_egress_disabled',
      'limits.egress "open" is disabled: an open sandbox can reach the host, the local network and cloud metadata. Set extensionConfig."sandbox-docker".allowOpenEgress to true only in a trusted environment, or use "allowlist".',
    );
  }
  // Validated for every tier, used only by the allowlist tier (the others have no proxy).
  const checkedHosts = checkAllowHosts(spec.limits.allowHosts);
  const allowHosts = tier === 'allowlist' ? checkedHosts : [];
  const limits = dockerLimits(spec.limits, config.volumeDriver);
  const extraLabels: Record<string, string> = {};
  for (const [key, value] of Object.entries(options.extraLabels)) {
    extraLabels[requirePrintableAscii(key, 'label name')] = requirePrintableAscii(value, `label ${key}`);
  }
  const names = namesFor(name);
  const labels = sandboxLabels(name, extraLabels);
  const containerLabels: Record<string, string> = { ...labels, [LABEL_EGRESS]: tier };
  if (tier === 'allowlist') containerLabels[LABEL_ALLOW_HOSTS] = allowHosts.join(',');

  const env = checkEnv(spec.env, 'spec.env');
  if (tier === 'allowlist') {
    const proxy = `http://${names.egress}:${EGRESS_PROXY_PORT}`;
    Object.assign(env, {
      HTTP_PROXY: proxy,
      HTTPS_PROXY: proxy,
      http_proxy: proxy,
      https_proxy: proxy,
      NO_PROXY: 'localhost,127.0.0.1,::1',
      no_proxy: 'localhost,127.0.0.1,::1',
    });
  }

  let workspaceVolume = names.workspaceVolume;
  let persistentWorkspace: SandboxPlan['persistentWorkspace'];
  if (spec.workspace !== undefined) {
    const durability = spec.workspace.durability ?? 'ephemeral';
    if (durability !== 'ephemeral' && durability !== 'persistent') {
      throw new SandboxError('invalid_spec', `workspace.durability ${JSON.stringify(durability)} is not "ephemeral" or "persistent".`);
    }
    if (durability === 'persistent') {
      workspaceVolume = persistentWorkspaceVolume(spec.workspace.key);
      persistentWorkspace = {
        key: spec.workspace.key,
        // Not tied to one sandbox name: it outlives the session that created it.
        labels: { ...extraLabels, [LABEL_SANDBOX]: '1', [LABEL_WORKSPACE_KEY]: spec.workspace.key },
      };
    }
  }

  return {
    names,
    image,
    tier,
    allowHosts,
    limits,
    env,
    labels,
    containerLabels,
    workspaceVolume,
    persistentWorkspace,
    runtime: config.runtime,
    sharedNetwork: config.network,
    egressProxyImage: config.egressProxyImage,
    volumeDriver: config.volumeDriver,
  };
}
