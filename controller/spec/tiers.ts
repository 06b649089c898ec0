/**
 * What each egress tier means, written once: where the sandbox container is attached, whether it
 * has an egress proxy of its own, and whether the deployment must allow it. Every decision that
 * depends on a tier (the plan, the create bodies, create and recovery, the operator CLI) reads
 * this table and never compares tier names, so a tier added to the schema (sandbox-spec.ts)
 * does not compile until its row here is written, and its row decides every use.
 */
import type { EgressTier } from './sandbox-spec.js';

/** One row. A proxy is reached over the sandbox's internal network, so only that row may have one. */
export type TierMeaning = {
  /** Needs `allowOpenEgress` in the deployment config. */
  readonly needsAllowOpenEgress: boolean;
} & (
  | {
      /**
       * Where the sandbox container is attached: no network at all, or the deployment's shared
       * bridge (which reaches whatever the host network reaches).
       */
      readonly sandboxNetwork: 'none' | 'shared';
      readonly egressProxy: false;
    }
  | {
      /** Its own internal network: no route out, no address of the host. */
      readonly sandboxNetwork: 'internal';
      /**
       * Its own egress proxy (`cap-<id>-egress`, on the shared network with a leg on the internal
       * one): the only way out; `allowHosts` apply and the proxy variables point at it.
       */
      readonly egressProxy: boolean;
    }
);

export const TIERS = {
  none: { sandboxNetwork: 'none', egressProxy: false, needsAllowOpenEgress: false },
  internal: { sandboxNetwork: 'internal', egressProxy: false, needsAllowOpenEgress: false },
  allowlist: { sandboxNetwork: 'internal', egressProxy: true, needsAllowOpenEgress: false },
  open: { sandboxNetwork: 'shared', egressProxy: false, needsAllowOpenEgress: true },
} as const satisfies Record<EgressTier, TierMeaning>;

/** Something of the sandbox sits on the deployment's shared network: its proxy, or itself. */
export function usesSharedNetwork(meaning: TierMeaning): boolean {
  return meaning.egressProxy || meaning.sandboxNetwork === 'shared';
}

/**
 * What the tier a sandbox container recorded in its label means. A label this controller did not
 * write, or none, means what `none` means: no network and no proxy of its own to bring back.
 */
export function meaningOfLabel(label: string | undefined): TierMeaning {
  return label !== undefined && Object.hasOwn(TIERS, label) ? TIERS[label as EgressTier] : TIERS.none;
}

/**
 * How the deployment gives allowlist sandboxes their way out (`egressIsolation`): `shared`, a
 * shard of the engine's one egress service serves many sandboxes, each on its own network and told
 * apart by it; `sandbox`, every sandbox has a proxy process of its own.
 */
export type EgressIsolation = 'shared' | 'sandbox';

/** Which proxy serves a sandbox: none, its own (`cap-<id>-egress`), or a shard of the shared egress. */
export type EgressHost = 'none' | 'own' | 'shard';

/**
 * The one place that decides where a sandbox's egress runs. A shard serves a registration: an
 * allowlist, its ports and its mode. A sandbox whose proxy must inspect TLS or hold secrets
 * (`ownProxyNeeded`) keeps a proxy of its own whatever the deployment says: a shard never holds
 * one tenant's CA key or credentials beside another's.
 */
export function egressHostOf(meaning: TierMeaning, isolation: EgressIsolation, ownProxyNeeded: boolean): EgressHost {
  if (!meaning.egressProxy) return 'none';
  return isolation === 'shared' && !ownProxyNeeded ? 'shard' : 'own';
}

/** Which proxy serves a sandbox, from its container's labels (`LABEL_EGRESS`, `LABEL_EGRESS_ISOLATION`). */
export function egressHostOfLabels(tier: string | undefined, isolation: string | undefined): EgressHost {
  const meaning = meaningOfLabel(tier);
  if (!meaning.egressProxy) return 'none';
  return isolation === 'shared' ? 'shard' : 'own';
}
