/**
 * One script of engine calls with the answer Docker 20.10 gives to each, run against the real
 * engine (docker-fake-engine.test.ts) and against the in-memory engine (fake-engine.test.ts): the
 * fake-engine tests of create and recovery are only as real as this agreement.
 */
import { engineStatus, type ExecRequest } from '../../../controller/docker/engine.js';
import type { SandboxEngine } from '../../../controller/docker/sandbox-engine.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

/** The engine under test, plus `docker pause` and `docker network disconnect`, which the controller never calls. */
export interface ScriptEngine extends SandboxEngine {
  pause(name: string): Promise<void>;
  disconnect(network: string, container: string): Promise<void>;
}

export interface ScriptNames {
  readonly network: string;
  readonly volume: string;
  /** A volume only the container's Mounts name: the create makes it. */
  readonly autoVolume: string;
  readonly container: string;
  /** Names nothing exists under. */
  readonly missing: string;
  readonly image: string;
  readonly missingImage: string;
  readonly labels: Readonly<Record<string, string>>;
  /** A network made with a subnet of its own, and two free /28 subnets for it. */
  readonly subnetNetwork: string;
  readonly subnets: readonly [string, string];
  /** A second container (on the subnet network). */
  readonly second: string;
}

export interface ScriptStep {
  readonly name: string;
  /** `ok`, a value, or `status N` (the engine's HTTP answer) / `error CODE`. */
  readonly want: string;
  /** `ids`: what earlier steps kept (network ids), by a name of the script's choosing. */
  readonly run: (e: ScriptEngine, n: ScriptNames, ids: Record<string, string>) => Promise<unknown>;
}

const exec = async (e: ScriptEngine, container: string): Promise<string> => {
  const request: ExecRequest = { cmd: ['true'], user: '0:0', onOutput: () => undefined };
  return `exit ${String(await (await e.startExec(container, request)).finished)}`;
};

const state = async (e: ScriptEngine, name: string): Promise<string> => {
  const v = await e.inspectContainer(name);
  return v === undefined ? 'none' : `${v.status} running=${String(v.running)} paused=${String(v.paused)}`;
};

const body = (n: ScriptNames, image = n.image): Record<string, unknown> => ({
  Image: image,
  Cmd: ['sleep', 'infinity'],
  Labels: { ...n.labels },
  HostConfig: {
    Init: true,
    NetworkMode: n.network,
    Mounts: [
      { Type: 'volume', Source: n.volume, Target: '/w' },
      { Type: 'volume', Source: n.autoVolume, Target: '/a' },
    ],
  },
});

const network = (n: ScriptNames) => ({ Name: n.network, CheckDuplicate: true, Internal: true, Labels: { ...n.labels } });

/** A network of its own subnet (the controller's shape: internal, no host address, a range). */
const subnetNetwork = (n: ScriptNames, subnet: string, checkDuplicate = true) => ({
  Name: n.subnetNetwork, CheckDuplicate: checkDuplicate, Internal: true,
  Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' },
  IPAM: { Config: [{ Subnet: subnet, IPRange: subnet.replace(/\/28$/, '/29') }] },
  Labels: { ...n.labels },
});

/** The last usable address of a /28. */
const lastUsable = (subnet: string): string => {
  const [a, b, c, d] = (subnet.split('/')[0] ?? '').split('.').map(Number);
  return `${a}.${b}.${c}.${(d ?? 0) + 14}`;
};

const onNetwork = (n: ScriptNames, networkId: string): Record<string, unknown> => ({
  Image: n.image, Cmd: ['sleep', 'infinity'], Labels: { ...n.labels }, HostConfig: { Init: true, NetworkMode: networkId },
});

/** Whether a container is on a network (by id), and at `address` when one is given. */
const attachedTo = async (e: ScriptEngine, container: string, networkId: string | undefined, address?: string): Promise<string> => {
  const v = await e.inspectContainer(container);
  const found = v?.networks.find((x) => x.id === networkId);
  if (found === undefined) return 'not attached';
  if (address === undefined) return 'attached';
  return found.ipv4 === address ? 'attached at that address' : `attached at ${found.ipv4}`;
};

export const ENGINE_SCRIPT: readonly ScriptStep[] = [
  { name: 'create a network', want: 'ok', run: async (e, n) => { await e.createNetwork(network(n)); } },
  { name: 'create it again', want: 'status 409', run: (e, n) => e.createNetwork(network(n)) },
  { name: 'create a volume', want: 'ok', run: (e, n) => e.createVolume({ Name: n.volume, Labels: { ...n.labels } } as { Name: string }) },
  { name: 'create it again', want: 'ok', run: (e, n) => e.createVolume({ Name: n.volume, Labels: { ...n.labels } } as { Name: string }) },
  { name: 'a volume of an unknown driver', want: 'status 404', run: (e, n) => e.createVolume({ Name: `${n.volume}x`, Driver: 'capybara-no-such-driver', Labels: { ...n.labels } } as { Name: string }) },
  { name: 'create a container', want: 'ok', run: async (e, n) => { await e.createContainer(n.container, body(n)); } },
  { name: 'create it again', want: 'status 409', run: (e, n) => e.createContainer(n.container, body(n)) },
  { name: 'create from a missing image', want: 'status 404', run: (e, n) => e.createContainer(n.missing, body(n, n.missingImage)) },
  { name: 'the create made the volume its Mounts name, on the local driver', want: 'local', run: async (e, n) => (await e.inspectVolume(n.autoVolume))?.driver },
  { name: 'inspect', want: 'created running=false paused=false', run: (e, n) => state(e, n.container) },
  { name: 'unpause a created container', want: 'status 500', run: (e, n) => e.unpauseContainer(n.container) },
  { name: 'exec into a created container', want: 'status 409', run: (e, n) => exec(e, n.container) },
  { name: 'start', want: 'ok', run: (e, n) => e.startContainer(n.container) },
  { name: 'start again (304)', want: 'ok', run: (e, n) => e.startContainer(n.container) },
  { name: 'inspect', want: 'running running=true paused=false', run: (e, n) => state(e, n.container) },
  { name: 'exec', want: 'exit 0', run: (e, n) => exec(e, n.container) },
  { name: 'remove a volume in use', want: 'status 409', run: (e, n) => e.removeVolume(n.volume) },
  { name: 'remove a network in use', want: 'status 403', run: (e, n) => e.removeNetwork(n.network) },
  { name: 'connect it again while running', want: 'status 403', run: (e, n) => e.connectNetwork(n.network, n.container) },
  { name: 'connect to a missing network', want: 'status 404', run: (e, n) => e.connectNetwork(n.missing, n.container) },
  { name: 'connect a missing container', want: 'status 404', run: (e, n) => e.connectNetwork(n.network, n.missing) },
  { name: 'pause', want: 'ok', run: (e, n) => e.pause(n.container) },
  { name: 'inspect', want: 'paused running=true paused=true', run: (e, n) => state(e, n.container) },
  { name: 'start a paused container', want: 'status 409', run: (e, n) => e.startContainer(n.container) },
  { name: 'exec into a paused container', want: 'status 409', run: (e, n) => exec(e, n.container) },
  { name: 'unpause', want: 'ok', run: (e, n) => e.unpauseContainer(n.container) },
  { name: 'unpause again', want: 'status 500', run: (e, n) => e.unpauseContainer(n.container) },
  { name: 'pause again', want: 'ok', run: (e, n) => e.pause(n.container) },
  { name: 'stop a paused container', want: 'ok', run: (e, n) => e.stopContainer(n.container, 0) },
  { name: 'inspect', want: 'exited running=false paused=false', run: (e, n) => state(e, n.container) },
  { name: 'stop again (304)', want: 'ok', run: (e, n) => e.stopContainer(n.container, 0) },
  { name: 'exec into a stopped container', want: 'status 409', run: (e, n) => exec(e, n.container) },
  { name: 'remove the network of a stopped container', want: 'ok', run: (e, n) => e.removeNetwork(n.network) },
  { name: 'the network is gone', want: 'none', run: async (e, n) => (await e.inspectNetwork(n.network))?.name ?? 'none' },
  { name: 'start without its network', want: 'status 404', run: (e, n) => e.startContainer(n.container) },
  { name: 'create the network again, same name', want: 'ok', run: async (e, n) => { await e.createNetwork(network(n)); } },
  { name: 'start: bound to the old network by id', want: 'status 404', run: (e, n) => e.startContainer(n.container) },
  { name: 'restart: the same', want: 'status 500', run: (e, n) => e.restartContainer(n.container) },
  { name: 'connect the stopped container to the new network', want: 'ok', run: (e, n) => e.connectNetwork(n.network, n.container) },
  { name: 'start on it', want: 'ok', run: (e, n) => e.startContainer(n.container) },
  { name: 'restart', want: 'ok', run: (e, n) => e.restartContainer(n.container) },
  { name: 'inspect', want: 'running running=true paused=false', run: (e, n) => state(e, n.container) },
  { name: 'remove the container (forced)', want: 'ok', run: (e, n) => e.removeContainer(n.container) },
  { name: 'remove it again', want: 'ok', run: (e, n) => e.removeContainer(n.container) },
  { name: 'inspect', want: 'none', run: (e, n) => state(e, n.container) },
  { name: 'stop a missing container', want: 'ok', run: (e, n) => e.stopContainer(n.missing, 0) },
  { name: 'start a missing container', want: 'status 404', run: (e, n) => e.startContainer(n.missing) },
  { name: 'restart a missing container', want: 'status 404', run: (e, n) => e.restartContainer(n.missing) },
  { name: 'unpause a missing container', want: 'status 404', run: (e, n) => e.unpauseContainer(n.missing) },
  { name: 'exec into a missing container', want: 'status 404', run: (e, n) => exec(e, n.missing) },
  { name: 'remove the volumes', want: 'ok', run: (e, n) => Promise.all([e.removeVolume(n.volume), e.removeVolume(n.autoVolume)]) },
  { name: 'remove a missing volume', want: 'ok', run: (e, n) => e.removeVolume(n.volume) },
  { name: 'remove the network', want: 'ok', run: (e, n) => e.removeNetwork(n.network) },
  { name: 'remove a missing network', want: 'ok', run: (e, n) => e.removeNetwork(n.network) },
  // Networks with a subnet of their own, by id, and two of one name (CheckDuplicate's race).
  { name: 'a network with a subnet of its own', want: 'ok', run: async (e, n, ids) => { ids.first = await e.createNetwork(subnetNetwork(n, n.subnets[0])); } },
  { name: 'inspect it by id', want: 'true', run: async (e, n, ids) => { const v = await e.inspectNetwork(ids.first ?? ''); return v?.name === n.subnetNetwork && v.subnets.join() === n.subnets[0]; } },
  { name: 'another network on an overlapping subnet', want: 'status 403', run: (e, n) => e.createNetwork({ ...subnetNetwork(n, n.subnets[0]), Name: n.missing }) },
  { name: 'a second network of the name (CheckDuplicate off)', want: 'ok', run: async (e, n, ids) => { ids.second = await e.createNetwork(subnetNetwork(n, n.subnets[1], false)); } },
  { name: 'inspect by the name both have', want: 'status 400', run: (e, n) => e.inspectNetwork(n.subnetNetwork) },
  { name: 'remove by the name both have', want: 'status 400', run: (e, n) => e.removeNetwork(n.subnetNetwork) },
  { name: 'both listed by their label', want: '2', run: async (e, n) => String((await e.listNetworks([`${Object.keys(n.labels)[0]}=${Object.values(n.labels)[0]}`])).filter((x) => x.name === n.subnetNetwork).length) },
  { name: 'a container on the first, by id, cannot start while the name is shared', want: 'status 400', run: async (e, n, ids) => { await e.createContainer(n.second, onNetwork(n, ids.first ?? '')); await e.startContainer(n.second); } },
  { name: 'remove the second by id', want: 'ok', run: (e, _n, ids) => e.removeNetwork(ids.second ?? '') },
  { name: 'now it starts', want: 'ok', run: (e, n) => e.startContainer(n.second) },
  { name: 'its network, by id', want: 'attached', run: (e, n, ids) => attachedTo(e, n.second, ids.first) },
  { name: 'remove the first by id while in use', want: 'status 403', run: (e, _n, ids) => e.removeNetwork(ids.first ?? '') },
  { name: 'disconnect the container', want: 'not attached', run: async (e, n, ids) => { await e.disconnect(ids.first ?? '', n.second); return attachedTo(e, n.second, ids.first); } },
  { name: 'connect at an address outside the subnet', want: 'status 500', run: (e, n, ids) => e.connectNetwork(ids.first ?? '', n.second, lastUsable(n.subnets[1])) },
  { name: 'connect at its last usable address', want: 'ok', run: (e, n, ids) => e.connectNetwork(ids.first ?? '', n.second, lastUsable(n.subnets[0])) },
  { name: 'attached there', want: 'attached at that address', run: (e, n, ids) => attachedTo(e, n.second, ids.first, lastUsable(n.subnets[0])) },
  { name: 'connect again', want: 'status 403', run: (e, n, ids) => e.connectNetwork(ids.first ?? '', n.second, lastUsable(n.subnets[0])) },
  { name: 'remove the container and the network by id', want: 'ok', run: async (e, n, ids) => { await e.removeContainer(n.second); await e.removeNetwork(ids.first ?? ''); } },
  { name: 'inspect a missing network by id', want: 'none', run: async (e, _n, ids) => (await e.inspectNetwork(ids.first ?? ''))?.name ?? 'none' },
];

/** Runs the script; one `name: outcome` line per step. */
export async function runEngineScript(engine: ScriptEngine, names: ScriptNames): Promise<string[]> {
  const out: string[] = [];
  const ids: Record<string, string> = {};
  for (const step of ENGINE_SCRIPT) {
    let outcome: string;
    try {
      const value = await step.run(engine, names, ids);
      outcome = value === undefined || Array.isArray(value) ? 'ok' : String(value);
    } catch (err) {
      const status = engineStatus(err);
      outcome = status !== undefined ? `status ${status}` : isSandboxError(err) ? `error ${err.code}` : `threw ${String(err)}`;
    }
    out.push(`${step.name}: ${outcome}`);
  }
  return out;
}

export const EXPECTED = ENGINE_SCRIPT.map((s) => `${s.name}: ${s.want}`);
