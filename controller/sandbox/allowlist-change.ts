/**
 * A running sandbox's allowlist changed (`changeAllowHosts`, `capybara-sandbox allow` and `deny`):
 * its egress proxy's registration is read, the hosts added and dropped, and the registration
 * written again with the same lifecycle id, in the sandbox's lane (one change at a time). The
 * proxy takes it within a second and closes the connections the new list refuses. The entries
 * are checked as at create; an invalid change changes nothing.
 */
import { DEFAULT_CONNECT_PORTS, type PolicyFile, type TenantRegistration } from '../../policy/index.js';
import { LABEL_EGRESS, SandboxError, checkAllowlistChange, inspectedEntries, meaningOfLabel, type AllowlistChange, type DeploymentConfig } from '../spec/index.js';
import type { SandboxEngine } from '../docker/index.js';
import { EGRESS_USER, readRegistration, seatOfSandbox, vacateIfStill, writeRegistration } from './egress-policy.js';
import type { EgressSeat } from './shards.js';
import type { SandboxLanes } from './sandbox-lanes.js';

/** The most entries an allowlist may hold after a change (the registration must fit the socket proxy's body cap). */
export const MAX_ALLOW_HOSTS = 1_000;

export interface AllowlistDeps {
  readonly engine: SandboxEngine;
  readonly lanes: SandboxLanes;
  /** The deployment's shared network: the shards of its shared egress are named after it. */
  readonly sharedNetwork: string;
  /** The deployment's inspected hosts and secrets: a host they name is never allowed live. */
  readonly config: Pick<DeploymentConfig, 'inspectHosts' | 'secrets'>;
  /** Brings the sandbox (and its proxy) up, as before a command. */
  ensureRunning(name: string): Promise<void>;
}

/** The list after the change: the old one in its order, new entries after it, dropped ones gone. */
export function changedList(current: readonly string[], change: { allow?: readonly string[] | undefined; deny?: readonly string[] | undefined }): string[] {
  const deny = new Set(change.deny ?? []);
  const next: string[] = [];
  for (const host of [...current, ...(change.allow ?? [])]) if (!deny.has(host) && !next.includes(host)) next.push(host);
  return next;
}

/**
 * Whether entry `entry` allows every name `denied` names: `*.example.com` covers `a.example.com`
 * and `*.a.example.com` (and itself); an exact name covers only itself.
 */
function covers(entry: string, denied: string): boolean {
  const [e, d] = [entry.toLowerCase(), denied.toLowerCase()];
  if (!e.startsWith('*.')) return e === d;
  const parent = e.slice(2);
  const names = d.startsWith('*.') ? d.slice(2) : d;
  return names.endsWith(`.${parent}`) || (d.startsWith('*.') && names === parent);
}

/**
 * Each denied entry the list after the change still allows whole, with the entry that does: a
 * deny of `a.example.com` under `*.example.com` dropped nothing, and the host stayed reachable
 * while the change said done. Names below a denied wildcard that the list names on their own
 * (`api.example.com` when `*.example.com` is denied) are kept: they were allowed one by one.
 */
export function deniedButAllowed(next: readonly string[], deny: readonly string[]): Array<{ readonly denied: string; readonly by: string }> {
  return deny.flatMap((denied) => {
    const by = next.find((entry) => covers(entry, denied));
    return by === undefined ? [] : [{ denied, by }];
  });
}

/**
 * What in a registration's policy the controller did not write: it writes plain host names, the
 * default ports and a mode. Entries with rules (a tunnel mode, methods, paths), other ports or
 * anything else came from elsewhere, and a change written back as plain names would drop them
 * (an entry limited to GET would allow every method), so such a registration is left as it is.
 */
export function notWrittenByController(policy: PolicyFile): string | undefined {
  const ruled = policy.allowHosts.find((e) => typeof e !== 'string');
  if (ruled !== undefined) return `the entry ${typeof ruled === 'string' ? ruled : ruled.host} carries rules`;
  const ports = [...policy.connectPorts].sort((a, b) => a - b);
  const defaults = [...DEFAULT_CONNECT_PORTS].sort((a, b) => a - b);
  if (ports.length !== defaults.length || ports.some((p, i) => p !== defaults[i])) return `its ports are ${policy.connectPorts.join(', ')}, not the default ones`;
  return undefined;
}

/** Applies `change` to sandbox `name`; the allowlist now in force. */
export async function changeAllowHosts(deps: AllowlistDeps, name: string, change: AllowlistChange): Promise<string[]> {
  const checked = checkAllowlistChange(change);
  const overlap = (checked.allow ?? []).filter((h) => (checked.deny ?? []).includes(h));
  if (overlap.length > 0) throw new SandboxError('invalid_spec', `The allowlist change was refused: ${overlap.join(', ')} is both allowed and denied; name each host once.`);
  // A registration's entries are plain tunnels: an entry the deployment inspects (or binds a
  // secret to) allowed so would pass uninspected, where a create with it gets a proxy that reads it.
  const inspected = inspectedEntries(deps.config, checked.allow ?? []);
  if (inspected.length > 0) {
    throw new SandboxError('invalid_spec', `The allowlist change was refused: ${inspected.join(', ')} is inspected by this deployment (inspectHosts or a secret's hosts), which only a proxy made for it at create does; create a sandbox with it in allowHosts.`);
  }
  await deps.ensureRunning(name);
  return deps.lanes.run(name, async () => {
    const view = await deps.engine.inspectContainer(name);
    if (view === undefined) throw new SandboxError('not_found', `Sandbox ${name} does not exist (its container is gone); create it again.`);
    if (!meaningOfLabel(view.labels[LABEL_EGRESS]).egressProxy) {
      throw new SandboxError('invalid_spec', `Sandbox ${name} has no egress proxy (egress tier ${JSON.stringify(view.labels[LABEL_EGRESS] ?? 'none')}): only an allowlist sandbox has an allowlist.`);
    }
    // Brought up just before (ensureRunning): a shard sandbox has its shard's leg again.
    const seat = await seatOfSandbox(deps.engine, name, view, deps.sharedNetwork);
    if (seat === undefined) throw new SandboxError('egress_unavailable', `The shard of the shared egress that serves ${name} is gone; retry (the next command brings one back).`);
    const held = await readRegistration(deps.engine, seat, EGRESS_USER);
    if (held === undefined || held.sandbox !== name) {
      throw new SandboxError(
        'allowlist_fixed',
        `The allowlist of ${name} is fixed: its egress proxy takes its policy from its environment (a sandbox with secrets or inspected hosts, or one created before live allowlists). Destroy it and create it again with the new list.`,
      );
    }
    const foreign = notWrittenByController(held.policy);
    if (foreign !== undefined) {
      throw new SandboxError(
        'allowlist_fixed',
        `The allowlist of ${name} was not changed: its registration was not written by the controller (${foreign}), and a change would drop that. Destroy the sandbox and create it again with the new list.`,
      );
    }
    const current = hostsOf(held);
    const next = changedList(current, checked);
    const still = deniedButAllowed(next, checked.deny ?? []);
    if (still.length > 0) {
      throw new SandboxError(
        'invalid_spec',
        `The allowlist change was refused, and nothing changed: ${still.map((s) => `${s.denied} would still be allowed by the entry ${s.by}`).join('; ')}. Deny that entry (and allow the names to keep), or the host stays reachable.`,
      );
    }
    if (next.length > MAX_ALLOW_HOSTS) throw new SandboxError('invalid_spec', `The allowlist change was refused: ${name} would have ${next.length} entries, over ${MAX_ALLOW_HOSTS}.`);
    const registration = {
      version: 1 as const,
      sandbox: name,
      lifecycle: held.lifecycle,
      subnet: held.subnet.text,
      address: held.address,
      policy: { allowHosts: next, ...(held.policy.mode === 'report' ? { mode: 'report' as const } : {}) },
    };
    // Fenced on the container, the lifecycle id and the list read: a destroy and a create of the
    // same id in another controller process (the lane is this process's only) can land between the
    // read and the write, on the same subnet, and the shard would take the earlier sandbox's
    // lifecycle id and list, written then, as a later registration: the new sandbox's. A change in
    // another process keeps the lifecycle id: written from a list read before it, a deny there was
    // undone here, and both said done.
    await fence(deps.engine, name, view.id, seat, held, current);
    await writeRegistration(deps.engine, seat, registration, name);
    // Made again while the write was under way: the slot it overwrote is vacated.
    const after = await deps.engine.inspectContainer(name);
    if (after?.id !== view.id) {
      await vacateIfStill(deps.engine, seat, held.lifecycle, name);
      throw changedMeanwhile(name);
    }
    // The archive API has no compare-and-swap: another process's change whose fence read came
    // before this write can land after it, from the list it read. Done only when in force now.
    const now = await readRegistration(deps.engine, seat, EGRESS_USER);
    const list = now?.lifecycle === held.lifecycle ? hostsOf(now) : undefined;
    if (list === undefined || !(checked.allow ?? []).every((h) => list.includes(h)) || deniedButAllowed(list, checked.deny ?? []).length > 0) throw changedAtOnce(name);
    return next;
  });
}

function changedMeanwhile(name: string): SandboxError {
  return new SandboxError('conflict', `The allowlist of ${name} was not changed: the sandbox was destroyed or made again by another call while the change ran; retry.`);
}

function changedAtOnce(name: string): SandboxError {
  return new SandboxError('conflict', `The allowlist of ${name} was changed by another call at the same moment, and this change may not be in force (capybara-sandbox inspect ${name} shows the list); retry.`);
}

/** A registration's plain host entries, the only ones the controller writes. */
function hostsOf(registration: TenantRegistration): string[] {
  return registration.policy.allowHosts.filter((e): e is string => typeof e === 'string');
}

/**
 * Throws unless sandbox `name` is still the container `id`, and `seat` still holds its
 * registration `held` with the list `hosts` read from it. Read last: nearest the write.
 */
async function fence(engine: SandboxEngine, name: string, id: string, seat: EgressSeat, held: TenantRegistration, hosts: readonly string[]): Promise<void> {
  if ((await engine.inspectContainer(name))?.id !== id) throw changedMeanwhile(name);
  const now = await readRegistration(engine, seat, EGRESS_USER);
  if (now === undefined || now.sandbox !== name || now.lifecycle !== held.lifecycle) throw changedMeanwhile(name);
  const list = hostsOf(now);
  if (list.length !== hosts.length || list.some((h, i) => h !== hosts[i]) || now.policy.mode !== held.policy.mode) throw changedAtOnce(name);
}
