/**
 * The steps that both a create (lifecycle.ts) and a recovery (recovery.ts) run to bring parts
 * of a sandbox up: a container create that pulls a missing image once, and the per-sandbox egress
 * proxy (created on the shared network, started, given its leg on the sandbox's internal network
 * at its fixed address, and asked for its health from inside the sandbox so the first command
 * can use it). The networks themselves are sandbox-network.ts.
 */
import { EGRESS_HEALTH_PATH, EGRESS_PROXY_PORT, EGRESS_SANDBOX_HEADER, sandboxHealthValue } from '../../common/index.js';
import { CA_CERT_ENV, CA_FILE, SandboxError, isSandboxError, type SandboxNames } from '../spec/index.js';
import { egressContainerBody, egressRegistration, finishedWithin, imageRefusal, type EgressPlan, engineStatus, volumeBody } from '../docker/index.js';
import { EGRESS_USER, holdsRegistration, ownSeat, readRegistration, registrable, vacateIfStill, writeRegistration } from './egress-policy.js';
import { connectShard, subnetSlot, type EgressSeat } from './shards.js';
import { ROOT_USER } from '../exec/index.js';
import type { BuildDeps } from './build-deps.js';
import { dockerSays } from './concurrent-change.js';
import type { SandboxNetwork } from './sandbox-network.js';

const EGRESS_READY_TIMEOUT_MS = 15_000;
/** Between health attempts: the proxy is usually up within a second of its start. */
const EGRESS_PROBE_PAUSE_S = 0.02;

/** What to do about an image the socket proxy does not admit. */
function imageNotAllowed(image: string, reason: string, cause: unknown): SandboxError {
  if (reason.startsWith('mount_image_volume')) {
    return new SandboxError(
      'image_unavailable',
      `The Docker socket proxy does not let a container with a volume run ${image} (${reason}): the image declares a VOLUME of its own, which dockerd would mount beside the sandbox's volumes by a path their content can redirect. Use an image without VOLUME lines (rebuild it FROM the same base without them).`,
      { cause },
    );
  }
  // A container with a volume (every sandbox, for its workspace; a proxy, for its policy) runs
  // only an image listed by name: its symlinks decide where the volume lands (SECURITY.md).
  if (reason.startsWith('mount_image_not_listed')) {
    return new SandboxError(
      'image_unavailable',
      `The Docker socket proxy does not let a container with a volume run ${image} (${reason}): only an image listed by name in the proxy's SOCKET_PROXY_IMAGES may (capybara-sandbox up lists the deployment's images); a registry in SOCKET_PROXY_REGISTRIES is not enough. List it by name once you know it has no directory symlinks beyond Debian's own.`,
      { cause },
    );
  }
  return new SandboxError(
    'image_unavailable',
    `The Docker socket proxy does not let the engine run or pull ${image} (${reason}): add it to the proxy's SOCKET_PROXY_IMAGES (capybara-sandbox up does for the deployment's images), ` +
      'or its registry to SOCKET_PROXY_REGISTRIES; images are meant to be on the engine already (bash scripts/build-images.sh, or a pre-pull on every node).',
    { cause },
  );
}

/** Returns the new container's id. */
export async function createContainerPullingOnce(deps: BuildDeps, name: string, image: string, body: unknown): Promise<string> {
  const { engine } = deps;
  try {
    return await engine.createContainer(name, body);
  } catch (err) {
    const refused = imageRefusal(err);
    if (refused !== undefined) throw imageNotAllowed(image, refused, err);
    // 404 also means a missing network; only a missing image is worth a pull.
    if (engineStatus(err) !== 404 || !/no such image/i.test((err as Error).message)) throw err;
    deps.logger.info({ image }, 'image not on the engine, pulling it once');
    try {
      await engine.pullImage(image);
    } catch (pullErr) {
      const pullRefused = imageRefusal(pullErr);
      if (pullRefused !== undefined) throw imageNotAllowed(image, pullRefused, pullErr);
      throw new SandboxError('image_unavailable', `Image ${image} is not on the engine and could not be pulled; build or pre-pull it on every Docker node.`, { cause: pullErr });
    }
    return engine.createContainer(name, body);
  }
}

/**
 * Creates the egress proxy on the shared network (`sharedNetwork`: its id) once `internalNetwork`
 * exists (its body names its fixed address there, where transparent mode listens), starts it,
 * then connects its leg on that network (API 1.41 takes one endpoint per create). Starting first
 * lets the proxy process load while the rest of the sandbox is built: its start-up is the longest
 * step of a create. Nothing can reach the proxy meanwhile but what the shared network allows (no
 * inter-container traffic), and the sandbox is only ever on its internal network. `proceed` is asked before each call (step-group.ts); `made`
 * is told the proxy container's id. Resolves to the registration the proxy reads its policy
 * from (kept when `rebuilding`, else new), when it reads one. `rebuilding` (a recovery) tells
 * whether the sandbox is still the container it read, which fences the registration it keeps or
 * writes (keepRegistration): another process can destroy the sandbox and make it again meanwhile,
 * and its proxy has the same name.
 */
export async function createEgress(
  deps: BuildDeps,
  plan: EgressPlan,
  sharedNetwork: string,
  internalNetwork: Promise<SandboxNetwork>,
  proceed: () => void = () => undefined,
  made: (name: string, id: string) => void = () => undefined,
  rebuilding?: { readonly same: () => Promise<boolean> },
): Promise<KeptRegistration | undefined> {
  // Its transparent listeners bind the fixed address, so the body waits for the network.
  const network = await internalNetwork;
  proceed();
  // Its policy a registration it reads from a volume (egress-policy.ts), where it can be.
  const target = plan.credentials === undefined ? registrable(network) : undefined;
  const volume = target === undefined ? undefined : plan.names.egressPolicyVolume;
  if (volume !== undefined) await deps.engine.createVolume(volumeBody(volume, plan.labels, undefined, undefined));
  proceed();
  const body = egressContainerBody(plan, sharedNetwork, deps.egressTestHosts, network.egressAddress, deps.egressMode, volume);
  made(plan.names.egress, await createContainerPullingOnce(deps, plan.names.egress, plan.egressProxyImage, body));
  proceed();
  await deps.engine.startContainer(plan.names.egress);
  proceed();
  // Written while the proxy process loads, and in force before its leg on the sandbox's network
  // exists, so before the sandbox can send it anything (until then it holds no registration and
  // refuses every client); the probe waits until the proxy names it.
  const seat = ownSeat(plan.names);
  const lifecycle = target === undefined ? undefined : rebuilding !== undefined ? await keepRegistration(deps, plan, seat, target, rebuilding.same) : await writeNew(deps, plan, seat, target);
  proceed();
  await connectEgress(deps, plan.names.egress, network);
  return lifecycle === undefined || target === undefined ? undefined : { lifecycle, seat, target };
}

/** A new registration of the sandbox's own proxy, written into `seat`; its lifecycle id. */
async function writeNew(deps: BuildDeps, plan: EgressPlan, seat: EgressSeat, target: RegistrationTarget): Promise<string> {
  const registration = egressRegistration(plan.names, target, plan.allowHosts, deps.egressMode);
  await writeRegistration(deps.engine, seat, registration, plan.names.name);
  return registration.lifecycle;
}

/** The network a registration is for: its subnet and the proxy's address on it. */
export interface RegistrationTarget {
  readonly subnet: string;
  readonly address: string;
}

/**
 * A registration recovery kept or wrote: its lifecycle id, where it is, and for which network. No
 * lifecycle id: the proxy was rebuilt by a concurrent recovery, which writes the registration; it
 * is the one at the seat once the proxy answers.
 */
export interface KeptRegistration {
  readonly lifecycle: string | undefined;
  readonly seat: EgressSeat;
  readonly target: RegistrationTarget;
}

/**
 * waitForEgress after a recovery: for the registration it kept or wrote, when there is one. Two
 * controller processes that both found it missing each write one, and the last write stays: when
 * the probe fails and the seat holds the sandbox's registration under another lifecycle id (the
 * other process's), that one is waited for instead.
 */
export async function waitForKept(deps: BuildDeps, names: SandboxNames, found: KeptRegistration | undefined, host = names.egress): Promise<void> {
  const kept = found !== undefined && found.lifecycle === undefined ? await adoptRegistration(deps, names, found) : found;
  try {
    await waitForEgress(deps, names, kept?.lifecycle, host);
  } catch (err) {
    if (kept === undefined || !isSandboxError(err, 'egress_unavailable')) throw err;
    const now = await readRegistration(deps.engine, kept.seat, EGRESS_USER);
    if (now === undefined || now.lifecycle === kept.lifecycle || !holdsRegistration(now, names.name, kept.target)) throw err;
    await waitForEgress(deps, names, now.lifecycle, host);
  }
}

/**
 * The registration a concurrent recovery wrote into the proxy it rebuilt: that recovery writes it
 * before it connects the proxy's leg on the sandbox's network, so once the proxy answers the probe
 * from there, the seat holds it.
 */
async function adoptRegistration(deps: BuildDeps, names: SandboxNames, pending: KeptRegistration): Promise<KeptRegistration> {
  await waitForEgress(deps, names, undefined);
  const now = await readRegistration(deps.engine, pending.seat, EGRESS_USER);
  if (now === undefined || !holdsRegistration(now, names.name, pending.target)) {
    throw new SandboxError(
      'egress_unavailable',
      `The egress proxy of ${names.name}, rebuilt by another call at the same moment, answers without holding this sandbox's registration; a resume (the provider's, or \`capybara-sandbox exec ${names.name} -- true\`) writes it back.`,
    );
  }
  return { ...pending, lifecycle: now.lifecycle };
}

/**
 * A rebuilt proxy's registration, or a sandbox's on a shard it joins again: the one at `seat`,
 * which live changes made, kept (on the network as it is now, with a new lifecycle id when that
 * moved); the allowlist of the sandbox's label when the seat holds none of this sandbox's. Read
 * once the egress container runs (a `cat` needs a running container): until then a stale
 * registration matches no client of the network, and nothing is let through.
 */
export async function keepRegistration(
  deps: BuildDeps,
  plan: Pick<EgressPlan, 'names' | 'allowHosts'>,
  seat: EgressSeat,
  target: RegistrationTarget,
  /** Whether the sandbox is still the one whose labels `plan` is from (the same container). */
  same?: () => Promise<boolean>,
): Promise<string> {
  // A read that fails is the rebuild's error (retried by the next recovery): falling back to the
  // label's list would allow again what a live deny dropped. Meanwhile the proxy serves the
  // registration as it is.
  const held = await readRegistration(deps.engine, seat, EGRESS_USER);
  if (held !== undefined && holdsRegistration(held, plan.names.name, target)) return held.lifecycle;
  const allowHosts = held?.sandbox === plan.names.name ? held.policy.allowHosts.map((e) => (typeof e === 'string' ? e : e.host)) : plan.allowHosts;
  // Its mode too: a `run --report` sandbox stays in report mode, whichever controller writes it.
  const mode = held?.sandbox === plan.names.name ? (held.policy.mode ?? 'enforce') : deps.egressMode;
  const registration = egressRegistration(plan.names, target, allowHosts, mode);
  // Fenced on the sandbox read: a destroy and a create of the same id in another controller
  // process can land meanwhile, on the same subnet, and the earlier sandbox's list written then
  // would be the new one's (the check before a command, by name, subnet and address, keeps it).
  if (same !== undefined && !(await same())) throw changedDuringRecovery(plan.names.name);
  await writeRegistration(deps.engine, seat, registration, plan.names.name);
  if (same !== undefined && !(await same())) {
    // Made again while the write was under way: the slot it overwrote is vacated.
    await vacateIfStill(deps.engine, seat, registration.lifecycle, plan.names.name);
    throw changedDuringRecovery(plan.names.name);
  }
  return registration.lifecycle;
}

function changedDuringRecovery(name: string): SandboxError {
  return new SandboxError('conflict', `${name} was destroyed or made again by another call while this recovery ran; retry.`);
}

/**
 * A sandbox served by a shard of the shared egress (shards.ts), once its network is made: its
 * registration put into the shard's volume, then the shard's leg connected at the network's
 * proxy address. The sandbox's own container is on no other network, so before that leg exists
 * it can send nothing anywhere.
 */
export async function joinShard(deps: BuildDeps, plan: Pick<EgressPlan, 'names' | 'allowHosts'>, shard: string, network: SandboxNetwork, proceed: () => void): Promise<string> {
  const lifecycle = await registerOnShard(deps, plan, shard, network);
  proceed();
  await connectShard(deps, shard, network, plan.names.egress);
  return lifecycle;
}

/**
 * The sandbox's registration put into the shard's volume, under its network's subnet; its
 * lifecycle id. On a warm network (warm-networks.ts) the shard's leg is there already, and this is
 * all the sandbox's joining takes.
 */
export async function registerOnShard(deps: BuildDeps, plan: Pick<EgressPlan, 'names' | 'allowHosts'>, shard: string, network: SandboxNetwork): Promise<string> {
  const target = registrable(network);
  if (target === undefined) throw new SandboxError('engine_error', `The network of ${plan.names.name} has no subnet of its own: a shard of the shared egress cannot serve it.`);
  const registration = egressRegistration(plan.names, target, plan.allowHosts, deps.egressMode);
  const seat = { container: shard, slot: subnetSlot(target.subnet) };
  await writeRegistration(deps.engine, seat, registration, plan.names.name);
  // Fenced on the network: a destroy in another controller process can remove it while the write
  // is under way, and a later sandbox be given its subnet, so its slot, and register there first.
  // The network still there after the write means no other sandbox had the subnet before it
  // landed. Gone, the slot it overwrote is vacated here: the create's cleanup finds no network of
  // this name, so it would not.
  if ((await deps.engine.inspectNetwork(network.id)) === undefined) {
    await vacateIfStill(deps.engine, seat, registration.lifecycle, plan.names.name);
    throw new SandboxError('conflict', `The network of ${plan.names.name} was removed by another call while its registration was written; retry.`);
  }
  return registration.lifecycle;
}

/**
 * Gives the egress proxy its leg on the sandbox's network, at its fixed address there. Already
 * connected (a recovery in another process did it a moment before) is as good as done.
 */
export async function connectEgress(deps: BuildDeps, egress: string, network: SandboxNetwork): Promise<void> {
  try {
    await deps.engine.connectNetwork(network.id, egress, network.egressAddress);
  } catch (err) {
    if (!dockerSays(err, 403, /already exists/)) throw err;
  }
}

/** How long past the probe's own deadline the controller waits for its exec to end. */
const PROBE_GRACE_S = 5;

/**
 * Waits until the egress proxy answers its health endpoint, asked from inside the sandbox at
 * `host`, what the sandbox's proxy variables name (its proxy's name, or on a warm network its
 * address): that proves the proxy process serves HTTP and that the sandbox reaches it through its
 * internal network. With a registration (`lifecycle`: the
 * id of the one this sandbox must be served under, on a shard or in a proxy of its own) the answer
 * must also name this sandbox and that registration (EGRESS_SANDBOX_HEADER), which it does only
 * once the proxy serves it to the network the probe comes from: it answers an unregistered
 * client's health check too, and an earlier registration of the same name and subnet has another
 * lifecycle id. One exec, all in bash: no process is forked per attempt (the pause is a `read`
 * timeout on a pipe nobody writes), so waiting costs next to no CPU while the proxy itself
 * starts.
 */
export async function waitForEgress(deps: BuildDeps, names: SandboxNames, lifecycle: string | undefined, host = names.egress): Promise<void> {
  const seconds = Math.ceil(EGRESS_READY_TIMEOUT_MS / 1000);
  // The proxy's name, or on a warm network its address: a checked name or an IPv4 address, nothing to quote.
  if (!/^[A-Za-z0-9_.-]+$/.test(host)) throw new SandboxError('engine_error', `The egress proxy of ${names.name} cannot be probed at ${JSON.stringify(host)}.`);
  const authority = `${host}:${EGRESS_PROXY_PORT}`;
  // A checked sandbox name (letters, digits, "_" and "-") and a lifecycle id (a UUID, or one read
  // back from a registration the proxy's schema admitted: letters, digits and "-"): nothing to quote.
  const expected = lifecycle === undefined ? undefined : `${EGRESS_SANDBOX_HEADER}: ${sandboxHealthValue(names.name, lifecycle)}`;
  if (expected !== undefined && !/^[A-Za-z0-9_ :;=.-]+$/.test(expected)) throw new SandboxError('engine_error', `The registration of ${names.name} has a lifecycle id the probe cannot check: ${JSON.stringify(lifecycle)}.`);
  const registered = expected === undefined
    ? ''
    : ` && { named=; while read -r -t 2 -u 3 field && [[ $field != $'\\r' ]]; do [[ $field == $'${expected}\\r' ]] && named=1; done; [[ -n $named ]]; }`;
  const probe = [
    'exec 2>/dev/null 4<> <(:)',
    // A sandbox that trusts the deployment CA: its root idle process writes ca.pem last (docker/ca-trust.ts).
    `[ -z "\${${CA_CERT_ENV}-}" ] || until [ -s ${CA_FILE} ]; do read -r -t ${EGRESS_PROBE_PAUSE_S} -u 4 || :; done`,
    `until exec 3<>/dev/tcp/${host}/${EGRESS_PROXY_PORT} &&`,
    `  printf 'GET ${EGRESS_HEALTH_PATH} HTTP/1.1\\r\\nHost: ${authority}\\r\\nConnection: close\\r\\n\\r\\n' >&3 &&`,
    `  read -r -t 2 -u 3 status && [[ $status == 'HTTP/1.1 200 '* ]]${registered}`,
    `do exec 3>&-; read -r -t ${EGRESS_PROBE_PAUSE_S} -u 4 || :; done`,
  ].join('\n');
  // One attempt can block on a name lookup (a proxy that exited leaves its name unresolvable),
  // so `timeout` holds the whole loop to the deadline, not just the attempt count. As root (with
  // no capabilities, as every process there): a process the sandbox user left running may signal
  // any process of that user, and one that stopped the probe's `timeout` held resume, and every
  // call queued behind it on the sandbox, for as long as it liked (review finding).
  const run = await deps.engine.startExec(names.container, {
    cmd: ['timeout', '-s', 'KILL', String(seconds), 'bash', '-c', probe],
    user: ROOT_USER,
    onOutput: () => undefined,
  });
  // A deadline of the controller's own, past the probe's: nothing in the sandbox decides how
  // long this waits.
  const ended = await finishedWithin(run, (seconds + PROBE_GRACE_S) * 1000);
  const code = ended === 'late' ? null : ended;
  if (code !== 0 && lifecycle !== undefined) {
    throw new SandboxError(
      'egress_unavailable',
      `The egress proxy serving ${names.name} (its own, or a shard of the shared egress) did not answer ${EGRESS_HEALTH_PATH} as this sandbox within ${seconds} s: it is down, or it does not hold the sandbox's registration; a resume (the provider's, or \`capybara-sandbox exec ${names.name} -- true\`) writes it back, and the proxy's log says why it refused one.`,
    );
  }
  if (code !== 0) {
    throw new SandboxError('egress_unavailable', `The egress proxy ${names.egress} did not answer ${EGRESS_HEALTH_PATH} within ${seconds} s; check the image ${deps.config.egressProxyImage} and its logs.`);
  }
}
