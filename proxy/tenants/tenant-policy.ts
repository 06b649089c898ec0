/**
 * A sandbox's policy on a shared proxy, built from its registration with the operator's settings
 * (the tunnel default, TLS required, the test pins). Inspected entries and secrets are not served
 * here yet: they need the deployment CA and per-sandbox values a shared proxy does not load, so a
 * registration asking for them is refused, never served without them.
 */
import { EGRESS_HINT_SANDBOX } from '../../common/index.js';
import { buildPolicy, PolicyError, type Policy, type PolicyFile, type PolicyInput, type Subnet } from '../../policy/index.js';


/** A registered sandbox network, with its built policy. */
export interface Tenant {
  /** The registration's file name, less `.json`: the network slot. */
  readonly slot: string;
  readonly sandbox: string;
  readonly lifecycle: string;
  readonly subnet: Subnet;
  /** The proxy's address on the network: its DNS responder's, and what allowed names resolve to. */
  readonly address: string;
  readonly policy: Policy;
}

/**
 * What the operator sets for every sandbox's policy. `{sandbox}` (EGRESS_HINT_SANDBOX) in the
 * refusal hint stands for the name of the sandbox refused: a registration's name is letters,
 * digits, `_`, `.` and `-`, so the hint stays printable ASCII.
 */
export type TenantSettings = Pick<PolicyInput, 'tunnelDefault' | 'requireTls' | 'testHosts' | 'refusalHint'>;

export function tenantPolicy(file: PolicyFile, settings: TenantSettings, source: string, sandbox: string): Policy {
  const unserved = file.allowHosts.flatMap((entry, i) =>
    typeof entry !== 'string' && (entry.inspect === true || entry.secrets !== undefined)
      ? [{ path: `policy.allowHosts[${i}]`, message: 'inspected entries and secrets are not served by a shared egress proxy yet; give this sandbox its own (egressIsolation: sandbox)' }]
      : [],
  );
  if (unserved.length > 0) throw new PolicyError(source, unserved);
  const refusalHint = settings.refusalHint?.replaceAll(EGRESS_HINT_SANDBOX, sandbox);
  const built = buildPolicy({ ...settings, refusalHint, allowHosts: file.allowHosts, connectPorts: file.connectPorts, mode: file.mode });
  if (!built.ok) throw new PolicyError(source, built.problems.map((p) => ({ path: `policy.${p.path}`, message: p.message })));
  return built.policy;
}

/** The policy of a connection whose registration ended: nothing is allowed. */
export const NOTHING_ALLOWED: Policy = (() => {
  const built = buildPolicy({ allowHosts: [] });
  if (!built.ok) throw new Error('the empty policy does not build');
  return built.policy;
})();
