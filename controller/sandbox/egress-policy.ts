/**
 * An allowlist sandbox's egress proxy reads its policy from a registration (policy/tenants.ts) in
 * a volume of its own, which the controller writes through the Docker API (the socket proxy admits
 * exactly common/tenant-archive.ts's archives): once as the proxy starts, before its leg on the
 * sandbox's network exists, and again for each live change (`changeAllowHosts`). The proxy takes
 * a change within a second, closes the connections the new list refuses, and a restart keeps the
 * list. A proxy with secrets or inspected hosts, or on a network made before the address pool (no
 * subnet to register), keeps the policy of its environment, fixed at create.
 */
import { registrationArchive, TENANTS_DIR, type SlotFileValue } from '../../common/index.js';
import { parseSlotFile, type TenantRegistration } from '../../policy/index.js';
import { LABEL_EGRESS, LABEL_EGRESS_ISOLATION, SandboxError, egressHostOfLabels, namesFor, type SandboxNames } from '../spec/index.js';
import { finishedWithin, type ContainerView, type SandboxEngine } from '../docker/index.js';
import type { SandboxNetwork } from './sandbox-network.js';
import { seatPath, shardSeatOf, type EgressSeat } from './shards.js';

/** The egress image's own non-root user, which reads the registration. */
export const EGRESS_USER = 'egress';
/** The one registration of a sandbox's own proxy: `sandbox.json`. */
export const EGRESS_SLOT = 'sandbox';
/** What a read of the registration may print: the socket proxy's body cap, and some. */
const READ_MAX_BYTES = 64 * 1024;
/**
 * How long a read of the registration may take. The `cat` runs as the proxy's own user, whom a
 * proxy process taken over by what it serves can stop: the check before each command of every
 * sandbox of a shard, and their lanes (a destroy waits there), would wait on it for good.
 */
const READ_DEADLINE_MS = 30_000;

/** The network to register, when it can be: a subnet of its own and the proxy's address on it. */
export function registrable(network: SandboxNetwork): { subnet: string; address: string } | undefined {
  return network.subnet === undefined || network.egressAddress === undefined ? undefined : { subnet: network.subnet, address: network.egressAddress };
}

/** The seat of a sandbox's own proxy. */
export function ownSeat(names: SandboxNames): EgressSeat {
  return { container: names.egress, slot: EGRESS_SLOT };
}

/**
 * Puts the registration into the egress container's volume (`seat`); one too large for the socket
 * proxy is `invalid_spec`, and nothing is sent. `sandbox` names it in that error.
 */
export async function writeRegistration(engine: SandboxEngine, seat: EgressSeat, value: SlotFileValue, sandbox: string): Promise<void> {
  let archive: Buffer;
  try {
    archive = registrationArchive(seat.slot, value);
  } catch (err) {
    throw new SandboxError('invalid_spec', `The allowlist of ${sandbox} was refused: ${(err as Error).message}.`, { cause: err });
  }
  await engine.putRegistration(seat.container, archive);
}

/**
 * Where the registration of sandbox `name` (its container `view`) lives: its own proxy's volume,
 * or the shard of the deployment's shared network (`sharedNetwork`) its network's label names; undefined for a tier without a proxy, or a shard
 * sandbox whose shard is gone (recovery brings one back).
 */
export async function seatOfSandbox(engine: SandboxEngine, name: string, view: ContainerView, sharedNetwork: string): Promise<EgressSeat | undefined> {
  const host = egressHostOfLabels(view.labels[LABEL_EGRESS], view.labels[LABEL_EGRESS_ISOLATION]);
  if (host === 'own') return ownSeat(namesFor(name));
  if (host === 'none') return undefined;
  const network = view.hostConfig.NetworkMode;
  return typeof network === 'string' && network !== '' ? shardSeatOf(engine, network, sharedNetwork) : undefined;
}

/**
 * The registration a running egress container reads at `seat`, by a `cat` in it as its own user;
 * undefined when there is none (a proxy whose policy is its environment, a vacant slot). A file
 * the controller did not write whole is an error that says so.
 */
export async function readRegistration(engine: SandboxEngine, seat: EgressSeat, user: string): Promise<TenantRegistration | undefined> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let held = 0;
  const run = await engine.startExec(seat.container, {
    cmd: ['cat', `${TENANTS_DIR}/${seat.slot}.json`],
    user,
    onOutput: (stream, chunk) => {
      if (stream === 'stderr' && err.length < 16) err.push(chunk);
      if (stream !== 'stdout' || held > READ_MAX_BYTES) return;
      held += chunk.length;
      out.push(chunk);
    },
  });
  const code = await finishedWithin(run, READ_DEADLINE_MS);
  const path = seatPath(seat);
  if (code === 'late') throw new SandboxError('engine_error', `The registration ${path} could not be read within ${READ_DEADLINE_MS / 1000} s; retry.`);
  // Only a file that is positively not there is "none": any other failure is an error, never a
  // reason to fall back to an older list.
  if (code === 1 && /No such file or directory/.test(Buffer.concat(err).toString('utf8'))) return undefined;
  if (code !== 0) throw new SandboxError('engine_error', `The registration ${path} could not be read (exit ${String(code)}); retry.`);
  if (held > READ_MAX_BYTES) throw new SandboxError('engine_error', `The registration ${path} is over ${READ_MAX_BYTES} bytes; destroy and create the sandbox again.`);
  let file;
  try {
    file = parseSlotFile(Buffer.concat(out).toString('utf8'), path);
  } catch (err) {
    throw new SandboxError('engine_error', `The registration ${path} cannot be read (${(err as Error).message}); destroy and create the sandbox again.`, { cause: err });
  }
  return file.vacant ? undefined : file;
}

/**
 * After a write under `lifecycle` landed where it no longer belonged (the sandbox, or its network,
 * made again or gone meanwhile): the slot made vacant, so the sandbox now there is refused until
 * the check before its next command writes its own, unless a later write replaced this one
 * already. The archive API has no compare-and-swap; this read and write are its nearest.
 */
export async function vacateIfStill(engine: SandboxEngine, seat: EgressSeat, lifecycle: string, sandbox: string): Promise<void> {
  const now = await readRegistration(engine, seat, EGRESS_USER).catch(() => undefined);
  if (now?.lifecycle === lifecycle) await writeRegistration(engine, seat, { version: 1, vacant: true }, sandbox);
}

/**
 * Whether `held` is sandbox `name`'s registration for its network as it is now (`target`): a
 * registration of another sandbox, or of an earlier network of the same name, is not.
 */
export function holdsRegistration(held: TenantRegistration, name: string, target: { readonly subnet: string; readonly address: string }): boolean {
  return held.sandbox === name && held.subnet.text === target.subnet && held.address === target.address;
}

/**
 * Whether an egress container reads its policy from registrations: it mounts a volume there. A
 * proxy with secrets or inspected hosts, or one made before registrations, does not.
 */
export function readsRegistrations(view: Pick<ContainerView, 'hostConfig'>): boolean {
  const mounts = view.hostConfig.Mounts;
  return Array.isArray(mounts) && mounts.some((m: unknown) => typeof m === 'object' && m !== null && (m as { Type?: unknown }).Type === 'volume' && (m as { Target?: unknown }).Target === TENANTS_DIR);
}
