/**
 * An in-memory Docker engine behind the controller's SandboxEngine interface, so that create,
 * recovery and commands can be tested in milliseconds, every branch of them, without a daemon.
 * It answers as Docker 20.10 does, and test/controller/docker/docker-fake-engine.test.ts holds it to
 * that: the same calls against the real engine and against this one give the same answers.
 *
 * What it models (the engine's observable behaviour, not its internals):
 *   containers  created / running / paused / exited; a taken name 409, a missing image 404
 *               ("No such image"), volumes named in Mounts created on the fly (unlabelled);
 *               a listing of the running (and paused) ones by label;
 *               start: paused 409, running 304 (success), a network gone 404; unpause of a
 *               container that is not paused 500; stop of a stopped one 304 (success);
 *               restart with a network gone 500; exec into a paused or stopped one 409
 *   networks    by id (the map's key) or by name; a taken name 409 with CheckDuplicate, a second
 *               network of the name without it, or when two creates of it overlap (the name is
 *               checked when a create starts, the network is there when it ends: Docker 20.10's
 *               CheckDuplicate race);
 *               a name several networks share: inspect, remove and connect 400 (ambiguous); a
 *               subnet overlapping another network's 403 ("Pool overlaps"); listing by labels;
 *               a container's network is resolved by name at its first start (a name two networks
 *               share: 400, even when the create named it by id), then bound by id: a network
 *               removed and created again under the same name is another network to a container
 *               that has started before (start 404), unless that container is connected to it
 *               again while stopped; removal while a running container is
 *               attached 403; connect: missing 404, twice while running 403, a fixed address
 *               outside the subnet 500, taken 403; disconnect (`docker network disconnect`)
 *   volumes     create of an existing one succeeds and changes nothing; removal while any
 *               container mounts it 409; an unknown driver 404; the archive that hands the
 *               volume at /workspace to the sandbox user (500 when no volume is mounted there);
 *               a registration archive into an egress container's registrations volume (its
 *               one file kept, per volume; 500 when no volume is mounted there), which a
 *               `cat FILE` exec in a container mounting that volume prints (exit 1 without it)
 *   images      present or not; a pull finds only what `registry` holds
 *   exec        a process model a test can replace (`onExec`): by default a command exits 0 with
 *               no output (a command of the controller's exec wrapper, whose exec carries the
 *               CAPYBARA_EXEC mark, first writes its start byte to stderr, as its shell does;
 *               the root check after a kill of everything finds no survivor), and one that dials `/dev/tcp/HOST/PORT` (the egress health probe)
 *               exits 0 when HOST is a running, unpaused container on a network it shares (and,
 *               when the probe waits for the answer to name a registration, HOST's
 *               registrations volume holds it: that sandbox, that lifecycle id), and 137 (killed
 *               by its `timeout -s KILL`) otherwise
 *   the *Optional calls of DockerEngine (inspect, stop, remove: a missing object is no error)
 *
 * Every call yields to the event loop before it acts, so concurrent callers interleave as they
 * do over a socket, and is recorded in `calls`. `beforeCall` hooks run first: they can fail a
 * call (throw `fake.status(...)`) or change the engine meanwhile (another replica, an operator).
 */
import { randomBytes } from 'node:crypto';
import { EngineStatusError, type ContainerSummary, type ResourceSummary, type ExecRequest, type ExecRun } from '../../controller/docker/engine.js';
import type { LogRead, LogRequest } from '../../controller/docker/engine-logs.js';
import type { ContainerView, NetworkView, SandboxEngine, VolumeView } from '../../controller/docker/sandbox-engine.js';
import { EXEC_MARK_VAR, STARTED_BYTE, SURVIVORS_MARKER } from '../../controller/exec/exec-script.js';
import { EGRESS_SANDBOX_HEADER, TENANTS_DIR } from '../../common/index.js';

type ContainerState = 'created' | 'running' | 'paused' | 'exited';

interface CreateBody {
  Image?: string;
  User?: string;
  Cmd?: string[];
  WorkingDir?: string;
  Env?: string[];
  Labels?: Record<string, string>;
  HostConfig?: Record<string, unknown> & { NetworkMode?: string; Mounts?: Array<{ Type?: string; Source?: string }> };
}

/**
 * A network attachment. Docker records it under the network's name and resolves that name when
 * the container first starts (so a name two networks share fails the start, 400, even when the
 * create named the network by id); from then on it is bound to the network's id.
 */
interface Attachment {
  name: string;
  /** Set once bound (a start, or a connect while running). */
  id: string | undefined;
  /** A fixed address (connect with IPAMConfig); dynamic ones are not modelled. */
  ipv4?: string;
  /** A second name the container answers to on this network only (connect with Aliases). */
  alias?: string;
}

interface FakeContainer {
  readonly id: string;
  readonly name: string;
  state: ContainerState;
  readonly body: CreateBody;
  attached: Attachment[];
  readonly volumes: readonly string[];
}

interface FakeNetwork {
  readonly id: string;
  readonly name: string;
  readonly body: Readonly<Record<string, unknown>>;
  readonly createdMs: number;
}

interface NetworkBody {
  Name: string;
  CheckDuplicate?: boolean;
  Internal?: boolean;
  Options?: Record<string, string>;
  Labels?: Record<string, string>;
  IPAM?: { Config?: Array<{ Subnet?: string }> };
}

/** An IPv4 CIDR as [first, last] address numbers. */
function cidrRange(cidr: string): [number, number] {
  const [addr = '', len = '32'] = cidr.split('/');
  const base = addr.split('.').reduce((a, o) => a * 256 + Number(o), 0);
  return [base, base + 2 ** (32 - Number(len)) - 1];
}

function addressNumber(ip: string): number {
  return ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
}

interface FakeVolume {
  readonly name: string;
  readonly body: Readonly<Record<string, unknown>>;
}

export interface FakeCall {
  readonly method: string;
  /** The object the call names (container, network or volume name, or image). */
  readonly target: string;
}

/** What a process run by an exec does: its exit code and output. */
export interface ExecOutcome {
  readonly exitCode: number | null;
  readonly stdout?: string;
  readonly stderr?: string;
}

export type ExecModel = (container: string, request: ExecRequest) => ExecOutcome | Promise<ExecOutcome>;

const newId = (): string => randomBytes(32).toString('hex');
const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class FakeEngine implements SandboxEngine {
  readonly containers = new Map<string, FakeContainer>();
  /** By id: several can share a name. */
  readonly networks = new Map<string, FakeNetwork>();
  readonly volumes = new Map<string, FakeVolume>();
  readonly images = new Set<string>();
  /** Labels an image declares: merged into its containers' for every key the create body does not set, as dockerd does. */
  readonly imageLabels = new Map<string, Record<string, string>>();
  /** Images a pull finds. */
  readonly registry = new Set<string>();
  /** Subnets of network creates under way. */
  private readonly pendingSubnets = new Set<string>();
  /** Volume drivers besides `local`. */
  readonly volumeDrivers = new Set<string>();
  readonly calls: FakeCall[] = [];
  /** Files archives put into volumes (putRegistration): volume, then file name, then content. */
  readonly volumeFiles = new Map<string, Map<string, Buffer>>();
  /** The process model of every exec (see the header). */
  onExec: ExecModel = (container, request) => this.defaultExec(container, request);
  private readonly hooks: Array<(call: FakeCall) => void | Promise<void>> = [];

  constructor(images: Iterable<string> = []) {
    for (const image of images) this.images.add(image);
  }

  /** Runs before every call (after the call is recorded); a throw fails the call. */
  beforeCall(hook: (call: FakeCall) => void | Promise<void>): void {
    this.hooks.push(hook);
  }

  /** Fails the next call of `method` on `target` with an engine status. */
  failOnce(method: string, target: string, status: number, message: string): void {
    let armed = true;
    this.beforeCall((call) => {
      if (armed && call.method === method && call.target === target) {
        armed = false;
        throw this.status(call, status, message);
      }
    });
  }

  /** The error DockerEngine raises for an engine answer with this status (engine-call.ts). */
  status(call: FakeCall, status: number, detail: string): EngineStatusError {
    const what = `${call.method} of ${call.target}`;
    return new EngineStatusError(status < 500 ? 'engine_refused' : 'engine_error', status, `Docker answered ${what} with ${status}: ${detail}`, undefined);
  }

  /** Calls so far of one method (on one target). */
  count(method: string, target?: string): number {
    return this.calls.filter((c) => c.method === method && (target === undefined || c.target === target)).length;
  }

  private async enter(method: string, target: string): Promise<FakeCall> {
    const call = { method, target };
    this.calls.push(call);
    await tick();
    for (const hook of this.hooks) await hook(call);
    return call;
  }

  private container(call: FakeCall): FakeContainer {
    const c = this.containers.get(call.target);
    if (c === undefined) throw this.status(call, 404, `No such container: ${call.target}`);
    return c;
  }

  private networkById(id: string | undefined): FakeNetwork | undefined {
    return id === undefined ? undefined : this.networks.get(id);
  }

  /** Every network of a name (Docker allows several). */
  networksNamed(name: string): FakeNetwork[] {
    return [...this.networks.values()].filter((n) => n.name === name);
  }

  /** The one network of a name, for tests (undefined when none or several). */
  networkNamed(name: string): FakeNetwork | undefined {
    const all = this.networksNamed(name);
    return all.length === 1 ? all[0] : undefined;
  }

  /** Not a controller call: a network another process (or an operator) made, with this id. */
  putNetwork(id: string, body: { Name: string } & Record<string, unknown>): void {
    this.networks.set(id, { id, name: body.Name, body: structuredClone(body), createdMs: Date.now() });
  }

  /** Names of every network, once per network. */
  networkNames(): string[] {
    return [...this.networks.values()].map((n) => n.name);
  }

  /** Docker's FindNetwork: an exact id, else a name only one network has (ambiguous otherwise). */
  private findNetwork(call: FakeCall, idOrName: string): FakeNetwork | undefined {
    const byId = this.networks.get(idOrName);
    if (byId !== undefined) return byId;
    const named = this.networksNamed(idOrName);
    if (named.length > 1) throw this.status(call, 400, `network ${idOrName} is ambiguous (${named.length} matches found on name)`);
    return named[0];
  }

  /** Resolves every attachment of a container about to start, as the engine does: the failure of the first that cannot be. */
  private resolveNetworks(c: FakeContainer): { status: number; message: string } | undefined {
    for (const a of c.attached) {
      if (a.id !== undefined) {
        if (this.networkById(a.id) === undefined) return { status: 404, message: `network ${a.id} not found` };
        continue;
      }
      const named = this.networksNamed(a.name);
      if (named.length > 1) return { status: 400, message: `network ${a.name} is ambiguous (${named.length} matches found on name)` };
      const n = named[0] ?? this.networks.get(a.name);
      if (n === undefined) return { status: 404, message: `network ${a.name} not found` };
      a.id = n.id;
      a.name = n.name;
    }
    return undefined;
  }

  // --- containers ---------------------------------------------------------------------------

  async inspectContainer(name: string): Promise<ContainerView | undefined> {
    await this.enter('inspectContainer', name);
    const c = this.containers.get(name);
    if (c === undefined) return undefined;
    return {
      id: c.id,
      status: c.state,
      running: c.state === 'running' || c.state === 'paused',
      paused: c.state === 'paused',
      labels: { ...(c.body.Labels ?? {}) },
      image: c.body.Image ?? '',
      user: c.body.User ?? '',
      cmd: [...(c.body.Cmd ?? [])],
      workingDir: c.body.WorkingDir ?? '',
      env: [...(c.body.Env ?? [])],
      hostConfig: structuredClone(c.body.HostConfig ?? {}),
      // Docker gives the network's id once the container has started on it.
      networks: c.attached.map((a) => ({
        name: a.name,
        id: c.state === 'running' || c.state === 'paused' ? a.id ?? '' : '',
        ipv4: a.ipv4 ?? '',
      })),
    };
  }

  async createContainer(name: string, rawBody: unknown): Promise<string> {
    const call = await this.enter('createContainer', name);
    const body = structuredClone(rawBody) as CreateBody;
    body.Labels = { ...this.imageLabels.get(body.Image ?? ''), ...body.Labels };
    const taken = this.containers.get(name);
    if (taken !== undefined) {
      throw this.status(call, 409, `Conflict. The container name "/${name}" is already in use by container "${taken.id}". You have to remove (or rename) that container to be able to reuse that name.`);
    }
    if (!this.images.has(body.Image ?? '')) throw this.status(call, 404, `No such image: ${body.Image ?? ''}`);
    const mode = body.HostConfig?.NetworkMode ?? 'default';
    // Recorded under the network's name (found by id or name), resolved at the first start.
    const known = this.networks.get(mode) ?? this.networksNamed(mode)[0];
    const attached: Attachment[] = mode === 'none' ? [] : [{ name: known?.name ?? mode, id: undefined }];
    const volumes = (body.HostConfig?.Mounts ?? []).filter((m) => m.Type === 'volume' && typeof m.Source === 'string').map((m) => m.Source as string);
    // A volume a create names that does not exist is made on the spot, without labels.
    for (const v of volumes) if (!this.volumes.has(v)) this.volumes.set(v, { name: v, body: { Name: v } });
    const id = newId();
    this.containers.set(name, { id, name, state: 'created', body, attached, volumes });
    return id;
  }

  /** The volumes whose root was handed to the sandbox user (an archive put at /workspace). */
  readonly sandboxUserVolumes = new Set<string>();

  async giveWorkspaceToSandboxUser(name: string): Promise<void> {
    const call = await this.enter('giveWorkspaceToSandboxUser', name);
    const c = this.container(call);
    // As the socket proxy's archive proof: a container whose one mount point is the volume the archive goes to.
    if ((c.body.HostConfig?.Mounts ?? []).length !== 1) throw this.status(call, 403, 'archive_mount_not_allowed (fake engine: the archive proof admits one mount point alone)');
    const mount = (c.body.HostConfig?.Mounts ?? []).find((m) => m.Type === 'volume' && (m as { Target?: string }).Target === '/workspace');
    // dockerd refuses to extract into a read-only root that no volume covers.
    if (mount?.Source === undefined) throw this.status(call, 500, 'container rootfs is marked read-only');
    this.sandboxUserVolumes.add(mount.Source);
  }

  async putRegistration(container: string, archive: Buffer): Promise<void> {
    const call = await this.enter('putRegistration', container);
    const c = this.container(call);
    const mount = (c.body.HostConfig?.Mounts ?? []).find((m) => m.Type === 'volume' && (m as { Target?: string }).Target === TENANTS_DIR);
    if (mount?.Source === undefined) throw this.status(call, 500, 'container rootfs is marked read-only');
    const field = (from: number, to: number): string => archive.subarray(from, to).toString('latin1').replace(/\0[\s\S]*$/, '');
    const size = parseInt(field(124, 136), 8);
    const files = this.volumeFiles.get(mount.Source) ?? new Map<string, Buffer>();
    files.set(field(0, 100), Buffer.from(archive.subarray(512, 512 + size)));
    this.volumeFiles.set(mount.Source, files);
  }

  /** The registration the egress proxy of sandbox `name` reads (its `sandbox.json`), parsed. */
  registration(name: string): { lifecycle: string; subnet: string; address: string; policy: { allowHosts: string[]; mode?: string } } | undefined {
    const file = this.fileIn(`${name}-egress`, `${TENANTS_DIR}/sandbox.json`);
    return file === undefined ? undefined : (JSON.parse(file.toString('utf8')) as ReturnType<FakeEngine['registration']>);
  }

  /** A file an archive put at `path` of a volume `container` mounts, if any. */
  fileIn(container: string, path: string): Buffer | undefined {
    const c = this.containers.get(container);
    for (const m of c?.body.HostConfig?.Mounts ?? []) {
      const target = (m as { Target?: string }).Target;
      if (m.Type !== 'volume' || m.Source === undefined || target === undefined || !path.startsWith(`${target}/`)) continue;
      return this.volumeFiles.get(m.Source)?.get(path.slice(target.length + 1));
    }
    return undefined;
  }

  async listRunningContainers(labels: readonly string[]): Promise<ContainerSummary[]> {
    await this.enter('listRunningContainers', labels.join(','));
    const carries = (c: FakeContainer): boolean => labels.every((l) => {
      const at = l.indexOf('=');
      return (c.body.Labels ?? {})[l.slice(0, at)] === l.slice(at + 1);
    });
    return [...this.containers.values()].filter((c) => (c.state === 'running' || c.state === 'paused') && carries(c)).map((c) => ({
      id: c.id, name: c.name, image: c.body.Image ?? '', state: c.state, status: c.state, createdMs: 0, labels: { ...(c.body.Labels ?? {}) },
      networks: c.attached.map((a) => ({ name: a.name, id: a.id ?? '', ipv4: a.ipv4 ?? '' })),
    }));
  }

  /** Every container carrying each label (`KEY=VALUE`, or `KEY`), stopped ones too: the operator CLI's listing. */
  async listContainers(labels: readonly string[]): Promise<ContainerSummary[]> {
    await this.enter('listContainers', labels.join(','));
    return [...this.containers.values()].filter((c) => carriesLabels(c.body.Labels ?? {}, labels)).map((c) => ({
      id: c.id, name: c.name, image: c.body.Image ?? '', state: c.state, status: c.state, createdMs: 0, labels: { ...(c.body.Labels ?? {}) },
      networks: c.attached.map((a) => ({ name: a.name, id: a.id ?? '', ipv4: a.ipv4 ?? '' })),
    }));
  }

  /** The names of the containers attached to the network, stopped ones too. */
  async containersOnNetwork(network: { readonly id: string; readonly name: string }): Promise<string[]> {
    await this.enter('containersOnNetwork', network.name);
    return [...this.containers.values()].filter((c) => c.attached.some((a) => a.id === network.id || a.name === network.name)).map((c) => c.name);
  }

  async startContainer(name: string): Promise<void> {
    const call = await this.enter('startContainer', name);
    const c = this.container(call);
    if (c.state === 'paused') throw this.status(call, 409, 'cannot start a paused container, try unpause instead');
    if (c.state === 'running') return; // 304: already started
    const failure = this.resolveNetworks(c);
    if (failure !== undefined) throw this.status(call, failure.status, failure.message);
    c.state = 'running';
  }

  async stopContainer(name: string, _graceSeconds: number): Promise<void> {
    await this.enter('stopContainer', name);
    const c = this.containers.get(name);
    if (c === undefined || c.state === 'created' || c.state === 'exited') return; // 404 ignored, 304
    c.state = 'exited';
  }

  async restartContainer(name: string): Promise<void> {
    const call = await this.enter('restartContainer', name);
    const c = this.container(call);
    const failure = this.resolveNetworks(c);
    if (failure !== undefined) {
      c.state = c.state === 'created' ? 'created' : 'exited';
      throw this.status(call, 500, `Cannot restart container ${name}: ${failure.message}`);
    }
    c.state = 'running';
  }

  /** Not a controller call: how a test (an operator, `docker pause`) pauses a container. */
  async pauseContainer(name: string): Promise<void> {
    const call = await this.enter('pauseContainer', name);
    const c = this.container(call);
    if (c.state !== 'running') throw this.status(call, 409, `Container ${c.id} is not running`);
    c.state = 'paused';
  }

  async unpauseContainer(name: string): Promise<void> {
    const call = await this.enter('unpauseContainer', name);
    const c = this.container(call);
    if (c.state !== 'paused') throw this.status(call, 500, `Container ${c.id} is not paused`);
    c.state = 'running';
  }

  async removeContainer(name: string): Promise<void> {
    await this.enter('removeContainer', name);
    this.containers.delete(name); // forced; a missing one is fine
    this.logs.delete(name); // its log goes with it
  }

  /** What each container wrote to its log, per stream, in order; a test (or an exec model) writes it. */
  readonly logs = new Map<string, Array<{ readonly stream: 'stdout' | 'stderr'; readonly chunk: Buffer }>>();

  /** Not a controller call: container `name` writes `text` to its log. */
  writeLog(name: string, text: string, stream: 'stdout' | 'stderr' = 'stdout'): void {
    const log = this.logs.get(name) ?? [];
    log.push({ stream, chunk: Buffer.from(text) });
    this.logs.set(name, log);
  }

  /** The engine's log read, without follow (the operator's logs -f is tested on the real engine). */
  async readLogs(name: string, request: LogRequest): Promise<LogRead> {
    const call = await this.enter('readLogs', name);
    this.container(call);
    if (request.follow) throw this.status(call, 501, 'the in-memory engine serves no followed log');
    for (const { stream, chunk } of this.logs.get(name) ?? []) request.onOutput(stream, chunk);
    return { finished: Promise.resolve(), stop: () => undefined };
  }

  // --- volumes ------------------------------------------------------------------------------

  async inspectVolume(name: string): Promise<VolumeView | undefined> {
    await this.enter('inspectVolume', name);
    const volume = this.volumes.get(name);
    if (volume === undefined) return undefined;
    const body = volume.body as { Driver?: string; DriverOpts?: Record<string, string> };
    return { driver: body.Driver ?? 'local', options: { ...body.DriverOpts } };
  }

  async createVolume(body: { Name: string }): Promise<void> {
    const call = await this.enter('createVolume', body.Name);
    const driver = (body as { Driver?: string }).Driver;
    if (driver !== undefined && driver !== 'local' && !this.volumeDrivers.has(driver)) {
      throw this.status(call, 404, `create ${body.Name}: error looking up volume plugin ${driver}: plugin "${driver}" not found`);
    }
    if (this.volumes.has(body.Name)) return; // an existing volume is returned as it is
    this.volumes.set(body.Name, { name: body.Name, body: structuredClone(body) });
  }

  async listVolumes(labels: readonly string[]): Promise<ResourceSummary[]> {
    await this.enter('listVolumes', labels.join(','));
    return [...this.volumes.values()]
      .map((v) => ({ id: v.name, name: v.name, createdMs: 0, labels: { ...((v.body as { Labels?: Record<string, string> }).Labels ?? {}) } }))
      .filter((v) => carriesLabels(v.labels, labels));
  }

  async removeVolume(name: string): Promise<void> {
    const call = await this.enter('removeVolume', name);
    if (!this.volumes.has(name)) return;
    const users = [...this.containers.values()].filter((c) => c.volumes.includes(name));
    if (users.length > 0) throw this.status(call, 409, `remove ${name}: volume is in use - [${users.map((c) => c.id).join(', ')}]`);
    this.volumes.delete(name);
  }

  // --- networks -----------------------------------------------------------------------------

  async inspectNetwork(idOrName: string): Promise<NetworkView | undefined> {
    const call = await this.enter('inspectNetwork', idOrName);
    const n = this.findNetwork(call, idOrName);
    return n === undefined ? undefined : this.networkView(n, true);
  }

  async listNetworks(labels: readonly string[]): Promise<NetworkView[]> {
    await this.enter('listNetworks', labels.join(','));
    const carries = (n: FakeNetwork): boolean => labels.every((l) => {
      const at = l.indexOf('=');
      return ((n.body.Labels ?? {}) as Record<string, string>)[l.slice(0, at)] === l.slice(at + 1);
    });
    return [...this.networks.values()].filter(carries).map((n) => this.networkView(n, false));
  }

  private networkView(n: FakeNetwork, members: boolean): NetworkView {
    const body = n.body as unknown as NetworkBody;
    return {
      id: n.id,
      name: n.name,
      createdMs: n.createdMs,
      internal: body.Internal === true,
      options: { ...(body.Options ?? {}) },
      labels: { ...(body.Labels ?? {}) },
      subnets: (body.IPAM?.Config ?? []).map((c) => c.Subnet ?? '').filter((x) => x !== ''),
      gateways: [],
      members: members
        ? [...this.containers.values()].filter((c) => c.state === 'running' && c.attached.some((a) => a.id === n.id)).map((c) => ({ name: c.name, ipv4: c.attached.find((a) => a.id === n.id)?.ipv4 ?? '' }))
        : [],
    };
  }

  private subnetOf(n: FakeNetwork): string | undefined {
    return (n.body as unknown as NetworkBody).IPAM?.Config?.[0]?.Subnet;
  }

  async createNetwork(body: { Name: string }): Promise<string> {
    const call = await this.enter('createNetwork', body.Name);
    const request = body as NetworkBody;
    if (request.CheckDuplicate === true && this.networksNamed(body.Name).length > 0) throw this.status(call, 409, `network with name ${body.Name} already exists`);
    // The subnet is reserved at once (IPAM holds a lock); the network is there only after it is
    // set up, a moment later: two creates of one name in that moment both pass CheckDuplicate.
    const subnet = request.IPAM?.Config?.[0]?.Subnet;
    if (subnet !== undefined) {
      const [first, last] = cidrRange(subnet);
      for (const taken of [...[...this.networks.values()].map((n) => this.subnetOf(n)), ...this.pendingSubnets]) {
        if (taken === undefined) continue;
        const [a, b] = cidrRange(taken);
        if (first <= b && a <= last) throw this.status(call, 403, 'Pool overlaps with other one on this address space');
      }
      this.pendingSubnets.add(subnet);
    }
    const createdMs = Date.now() + this.calls.length / 1e6;
    await tick();
    if (subnet !== undefined) this.pendingSubnets.delete(subnet);
    const id = newId();
    this.networks.set(id, { id, name: body.Name, body: structuredClone(body), createdMs });
    return id;
  }

  async removeNetwork(idOrName: string): Promise<void> {
    const call = await this.enter('removeNetwork', idOrName);
    const n = this.findNetwork(call, idOrName);
    if (n === undefined) return;
    const active = [...this.containers.values()].some((c) => (c.state === 'running' || c.state === 'paused') && c.attached.some((a) => a.id === n.id));
    if (active) throw this.status(call, 403, `error while removing network: network ${n.name} id ${n.id} has active endpoints`);
    this.networks.delete(n.id);
  }

  async connectNetwork(network: string, container: string, ipv4?: string, alias?: string): Promise<void> {
    const call = await this.enter('connectNetwork', container);
    const c = this.container(call);
    const n = this.findNetwork(call, network);
    if (ipv4 !== undefined && n !== undefined) {
      const subnet = this.subnetOf(n);
      const [first, last] = subnet === undefined ? [1, 0] : cidrRange(subnet);
      const at = addressNumber(ipv4);
      if (subnet === undefined) throw this.status(call, 400, 'user specified IP address is supported only when connecting to networks with user configured subnets');
      if (at < first || at > last) throw this.status(call, 500, `Invalid address ${ipv4}: It does not belong to any of this network's subnets`);
      const taken = [...this.containers.values()].some((o) => o !== c && o.attached.some((a) => a.id === n.id && a.ipv4 === ipv4));
      if (taken) throw this.status(call, 403, 'Address already in use');
    }
    if (c.state === 'running' || c.state === 'paused') {
      if (n === undefined) throw this.status(call, 404, `network ${network} not found`);
      if (c.attached.some((a) => a.id === n.id)) throw this.status(call, 403, `endpoint with name ${container} already exists in network ${n.name}`);
      c.attached.push({ name: n.name, id: n.id, ...(ipv4 === undefined ? {} : { ipv4 }), ...(alias === undefined ? {} : { alias }) });
      return;
    }
    // A container that is not running only has its settings changed: the attachment of that
    // name, resolved by name at its next start.
    const name = n?.name ?? network;
    c.attached = [...c.attached.filter((a) => a.name !== name), { name, id: undefined, ...(ipv4 === undefined ? {} : { ipv4 }), ...(alias === undefined ? {} : { alias }) }];
  }

  /** `docker network disconnect --force`: a shard's leg before its sandbox network goes (and tests' own disconnects). */
  async disconnectNetwork(network: string, container: string): Promise<void> {
    const call = await this.enter('disconnectNetwork', container);
    const c = this.container(call);
    const n = this.findNetwork(call, network);
    if (n === undefined) throw this.status(call, 404, `network ${network} not found`);
    if (!c.attached.some((a) => a.id === n.id || a.name === n.name)) throw this.status(call, 403, `container ${c.id} is not connected to network ${n.name}`);
    c.attached = c.attached.filter((a) => a.id !== n.id && a.name !== n.name);
  }

  // --- images and exec ----------------------------------------------------------------------

  async pullImage(image: string): Promise<void> {
    const call = await this.enter('pullImage', image);
    if (!this.registry.has(image)) throw this.status(call, 404, `pull access denied for ${image.split(':')[0] ?? image}, repository does not exist or may require 'docker login'`);
    this.images.add(image);
  }

  async startExec(container: string, request: ExecRequest): Promise<ExecRun> {
    const call = await this.enter('startExec', container);
    const c = this.container(call);
    if (c.state === 'paused') throw this.status(call, 409, `Container ${container} is paused, unpause the container before exec`);
    if (c.state !== 'running') throw this.status(call, 409, `Container ${c.id} is not running`);
    const outcome = Promise.resolve(this.onExec(container, request));
    const finished = outcome.then((o) => {
      if (o.stdout !== undefined && o.stdout !== '') request.onOutput('stdout', Buffer.from(o.stdout));
      if (o.stderr !== undefined && o.stderr !== '') request.onOutput('stderr', Buffer.from(o.stderr));
      return o.exitCode;
    });
    return { id: newId(), finished, detach: () => undefined };
  }

  /** The default process model: see the header. */
  defaultExec(container: string, request: ExecRequest): ExecOutcome {
    if (request.cmd.length === 2 && request.cmd[0] === 'cat') {
      const file = this.fileIn(container, request.cmd[1] ?? '');
      return file === undefined ? { exitCode: 1, stderr: `cat: ${request.cmd[1] ?? ''}: No such file or directory\n` } : { exitCode: 0, stdout: file.toString('utf8') };
    }
    if (request.cmd[3] === SURVIVORS_MARKER) return { exitCode: 0, stdout: `${SURVIVORS_MARKER} 0\n` };
    const dial = /\/dev\/tcp\/([^/\s]+)\/\d+/.exec(request.cmd.join('\n'));
    if (dial === null) return request.env?.some((e) => e.startsWith(`${EXEC_MARK_VAR}=`)) === true ? { exitCode: 0, stderr: String.fromCharCode(STARTED_BYTE) } : { exitCode: 0 };
    const proxy = this.reached(container, dial[1] ?? '');
    // A probe that waits for the health answer to name a registration passes only when the proxy
    // holds that registration (that sandbox, that lifecycle id) in its registrations volume.
    const named = new RegExp(`${EGRESS_SANDBOX_HEADER}: ([a-z0-9_.-]+); lifecycle=([A-Za-z0-9-]+)`, 'i').exec(request.cmd.join('\n'));
    if (proxy === undefined || (named !== null && !this.holds(proxy, named[1] ?? '', named[2] ?? ''))) return { exitCode: 137 };
    return { exitCode: 0 };
  }

  /** Whether container `proxy`'s registrations volume holds sandbox `sandbox`'s registration under `lifecycle`. */
  private holds(proxy: FakeContainer, sandbox: string, lifecycle: string): boolean {
    const mount = (proxy.body.HostConfig?.Mounts ?? []).find((m) => m.Type === 'volume' && (m as { Target?: string }).Target === TENANTS_DIR);
    const files = mount?.Source === undefined ? undefined : this.volumeFiles.get(mount.Source);
    return [...(files?.values() ?? [])].some((f) => {
      const value = JSON.parse(f.toString('utf8')) as { sandbox?: string; lifecycle?: string };
      return value.sandbox === sandbox && value.lifecycle === lifecycle;
    });
  }

  /** A running, unpaused container `to` (its name, its alias there, or its address there) on a network that `from` is attached to as well. */
  reachable(from: string, to: string): boolean {
    return this.reached(from, to) !== undefined;
  }

  private reached(from: string, to: string): FakeContainer | undefined {
    const a = this.containers.get(from);
    if (a === undefined) return undefined;
    const ids = new Set(a.attached.map((x) => x.id).filter((id) => id !== undefined && this.networkById(id) !== undefined));
    return [...this.containers.values()].find(
      (b) => b.state === 'running' && b.attached.some((x) => x.id !== undefined && ids.has(x.id) && (b.name === to || x.alias === to || x.ipv4 === to)),
    );
  }
}

/** Whether `have` carries every filter of a label listing: `KEY=VALUE`, or `KEY` (any value). */
function carriesLabels(have: Readonly<Record<string, string>>, filters: readonly string[]): boolean {
  return filters.every((l) => {
    const at = l.indexOf('=');
    return at < 0 ? have[l] !== undefined : have[l.slice(0, at)] === l.slice(at + 1);
  });
}
