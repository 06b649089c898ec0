/**
 * Resolves a sandbox spec against the deployment config into a plan: every name, label, limit
 * and network decision needed to build the Docker bodies. Pure; everything that can be refused is
 * refused here (the spec by its schema, then what depends on the deployment), before any engine
 * call.
 */
import { EGRESS_PROXY_PORT, encodeAllowHosts } from '../../common/index.js';
import type { DeploymentConfig, LogCaps } from './config.js';
import { SandboxError } from './errors.js';
import { dockerLimits, type DockerLimits } from './limits.js';
import {
  LABEL_ALLOW_HOSTS,
  LABEL_EGRESS,
  LABEL_WARM_NETWORK,
  LABEL_WORKSPACE_KEY,
  LABEL_SANDBOX,
  namesFor,
  persistentWorkspaceVolume,
  sandboxLabels,
  sandboxNameForId,
  type SandboxNames,
} from './names.js';
import { checkSandboxSpec, type EgressTier } from './sandbox-spec.js';
import { TIERS } from './tiers.js';
import type { SandboxCredentials } from './credential-plan.js';

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
  /**
   * A fresh tmpfs the sandbox user's HOME points at, when the workspace is persistent and the
   * deployment keeps HOME off it (SANDBOX_HOME); undefined: HOME is the image's.
   */
  readonly home: string | undefined;
  readonly logCaps: LogCaps;
  /** The egress proxy's CPU cap: one CPU, or the deployment's CPU ceiling when that is lower. */
  readonly egressNanoCpus: number;
  /**
   * Inspected hosts and secrets (credential-plan.ts): the proxy's policy, CA and values, the
   * sandbox's placeholders and trust. Undefined: nothing to inspect, EGRESS_ALLOW_HOSTS as before.
   */
  readonly credentials: SandboxCredentials | undefined;
}

/**
 * HOME of a sandbox whose persistent workspace an earlier sandbox may have written: a tmpfs of
 * its own, empty at every start, so no dotfile of an earlier sandbox (.bashrc, .profile,
 * .gitconfig, a Python .pth in the user site-packages, pip, npm and curl config, everything under
 * the XDG directories, which default to HOME) takes effect.
 */
const SANDBOX_HOME = '/home/sandbox';

/** The egress proxy is one Node process: a CPU is all it can use, and a flood of it takes no more. */
const EGRESS_CPUS = 1;

/** The egress proxy's CPU cap in a deployment: one CPU, or the CPU ceiling when that is lower. */
export function egressNanoCpus(config: Pick<DeploymentConfig, 'maxLimits'>): number {
  return Math.round(Math.min(EGRESS_CPUS, config.maxLimits.cpu) * 1e9);
}

/** The tiers an allowlist means something to, from the tier table. */
const PROXY_TIERS = Object.entries(TIERS).filter(([, m]) => m.egressProxy).map(([name]) => JSON.stringify(name)).join(', ');

export interface PlanOptions {
  /** Labels for every resource, already checked as printable ASCII (by the provider, once). */
  readonly extraLabels: Readonly<Record<string, string>>;
}

export function planSandbox(input: unknown, config: DeploymentConfig, options: PlanOptions): SandboxPlan {
  const spec = checkSandboxSpec(input);
  const name = sandboxNameForId(spec.id);
  if (config.allowedImages !== undefined && !config.allowedImages.includes(spec.image)) {
    throw new SandboxError(
      'invalid_spec',
      `spec.image ${JSON.stringify(spec.image)} is not one of the deployment's allowedImages (${config.allowedImages.map((i) => JSON.stringify(i)).join(', ')}); ask the operator to add it to extensionConfig."sandbox-docker".allowedImages.`,
    );
  }
  const tier = spec.limits.egress;
  const meaning = TIERS[tier];
  if (meaning.needsAllowOpenEgress && !config.allowOpenEgress) {
    throw new SandboxError(
      'open_egress_disabled',
      `limits.egress ${JSON.stringify(tier)} is disabled: an open sandbox can reach the host, the local network and cloud metadata. Set extensionConfig."sandbox-docker".allowOpenEgress to true only in a trusted environment, or use "allowlist".`,
    );
  }
  // An allowlist only means something to a tier with an egress proxy: anywhere else it would be
  // dropped without a word, and the caller left believing the sandbox reaches those hosts.
  const allowHosts = spec.limits.allowHosts ?? [];
  if (!meaning.egressProxy && allowHosts.length > 0) {
    throw new SandboxError(
      'invalid_spec',
      `The sandbox spec was refused: spec.limits.allowHosts is only used by a tier with an egress proxy (${PROXY_TIERS}), and limits.egress is ${JSON.stringify(tier)}; drop allowHosts, or use one of those tiers.`,
    );
  }
  const limits = dockerLimits(spec.limits, config.volumeDriver, config.maxLimits);
  const names = namesFor(name);
  const { extraLabels } = options;
  const labels = sandboxLabels(name, extraLabels);
  const containerLabels: Record<string, string> = { ...labels, [LABEL_EGRESS]: tier };

  const env: Record<string, string> = { ...spec.env };
  if (meaning.egressProxy) Object.assign(env, egressProxyEnv(names.egress));

  let workspaceVolume = names.workspaceVolume;
  let persistentWorkspace: SandboxPlan['persistentWorkspace'];
  let home: string | undefined;
  if (spec.workspace?.durability === 'persistent') {
    if (!config.persistentHome) {
      if (spec.env?.HOME !== undefined) {
        throw new SandboxError(
          'invalid_spec',
          'The sandbox spec was refused: spec.env.HOME cannot be set with a persistent workspace: HOME is a fresh tmpfs there, so nothing an earlier sandbox wrote runs in this one. Ask the operator for extensionConfig."sandbox-docker".persistentHome to keep HOME on the workspace.',
        );
      }
      home = SANDBOX_HOME;
      env.HOME = home;
    }
    workspaceVolume = persistentWorkspaceVolume(spec.workspace.key);
    // The sandbox container names its workspace: who holds it is asked by this label.
    containerLabels[LABEL_WORKSPACE_KEY] = spec.workspace.key;
    persistentWorkspace = {
      key: spec.workspace.key,
      // Not tied to one sandbox name: it outlives the session that created it.
      labels: { ...extraLabels, [LABEL_SANDBOX]: '1', [LABEL_WORKSPACE_KEY]: spec.workspace.key },
    };
  }

  const plan: SandboxPlan = {
    names,
    image: spec.image,
    tier,
    allowHosts: [],
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
    home,
    logCaps: { logMaxSizeMb: config.logMaxSizeMb, logMaxFiles: config.logMaxFiles },
    egressNanoCpus: egressNanoCpus(config),
    credentials: undefined,
  };
  return meaning.egressProxy ? withAllowHosts(plan, allowHosts) : plan;
}

/**
 * The plan with another allowlist: the hosts and the container's label recovery reads them
 * from. Also how the create bodies are measured with part of an allowlist (docker/body-budget.ts).
 */
export function withAllowHosts(plan: SandboxPlan, allowHosts: readonly string[]): SandboxPlan {
  return { ...plan, allowHosts, containerLabels: { ...plan.containerLabels, [LABEL_ALLOW_HOSTS]: encodeAllowHosts(allowHosts) } };
}

/**
 * The plan with its credentials: the sandbox's environment gains the placeholders, the CA and the
 * trust variables, over any of the spec's own of those names (as the proxy variables are).
 */
export function withCredentials(plan: SandboxPlan, credentials: SandboxCredentials | undefined): SandboxPlan {
  if (credentials === undefined) return plan;
  return { ...plan, credentials, env: { ...plan.env, ...credentials.sandboxEnv } };
}

/**
 * The proxy variables of a sandbox whose egress proxy is at `host`: its name (`cap-<id>-egress`,
 * the sandbox's own proxy or a shard's alias on its network), or on a warm network, which a shard
 * joined before the sandbox was known and so under no alias, its address there.
 */
export function egressProxyEnv(host: string): Record<string, string> {
  const proxy = `http://${host}:${EGRESS_PROXY_PORT}`;
  return {
    HTTP_PROXY: proxy,
    HTTPS_PROXY: proxy,
    http_proxy: proxy,
    https_proxy: proxy,
    NO_PROXY: 'localhost,127.0.0.1,::1',
    no_proxy: 'localhost,127.0.0.1,::1',
  };
}

/** The plan of a sandbox made on a warm network: recorded on its container, its proxy variables at `egressAddress`. */
export function onWarmNetwork(plan: SandboxPlan, network: string, egressAddress: string): SandboxPlan {
  return { ...plan, env: { ...plan.env, ...egressProxyEnv(egressAddress) }, containerLabels: { ...plan.containerLabels, [LABEL_WARM_NETWORK]: network } };
}

/** A container's environment (`NAME=value`) with its proxy variables at `host` instead. */
export function withEgressProxyEnv(env: readonly string[], host: string): string[] {
  const proxy = egressProxyEnv(host);
  return env.map((e) => {
    const name = e.slice(0, e.indexOf('='));
    return name in proxy ? `${name}=${proxy[name]!}` : e;
  });
}
