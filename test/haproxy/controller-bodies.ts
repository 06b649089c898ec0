/**
 * Every request body the controller builds, made by its own pure builders for every tier, option
 * and recovery path: the container bodies of both containers for each tier and runtime, with and
 * without a volume plugin, a persistent workspace, an environment, the log caps at their edges and
 * test hosts; the body of a container rebuilt from its inspect data; a shard of the shared egress
 * and its volume; the network, volume, connect and disconnect bodies (a shard's leg on a sandbox
 * network among them); the exec bodies of every script the controller runs. Nothing here is
 * written by hand but the inputs, so a change to a builder changes what the socket proxy's tests
 * check.
 */
import { parseDeploymentConfig, type DeploymentConfigInput } from '../../controller/spec/config.js';
import { parseAddressPool, sandboxSubnet, subnetSlots } from '../../controller/spec/address-pool.js';
import { egressNanoCpus, planSandbox, withCredentials } from '../../controller/spec/sandbox-plan.js';
import { sandboxCredentials } from '../../controller/spec/credential-plan.js';
import { egressContainerBody, handoverContainerBody, sandboxBodyFromInspect, sandboxContainerBody } from '../../controller/docker/container-spec.js';
import { internalNetworkBody, networkConnectBody, networkDisconnectBody, sharedNetworkBody } from '../../controller/docker/network-spec.js';
import { volumeBody } from '../../controller/docker/volume-spec.js';
import { egressShardName } from '../../controller/spec/names.js';
import { egressShardBody } from '../../controller/docker/shard-spec.js';
import { EXEC_START_BODY, execCreateBody } from '../../controller/docker/engine-exec.js';
import {
  MAX_INLINE_PAYLOAD, ROOT_USER, SANDBOX_USER, commandPayload, encodeArg, execMark, execMarkEnv, killAllCmd, killMarkedCmd, killTaggedCmd,
  isolatedFileCmd, readFileCmd, statCmd, wrapperCmd, writeFileCmd,
} from '../../controller/exec/exec-script.js';
import type { SandboxSpec } from '../../controller/spec/contract.js';

export type BodyRoute = 'container_create' | 'network_create' | 'network_connect' | 'network_disconnect' | 'volume_create' | 'exec_create' | 'exec_start';

export interface ControllerBody {
  readonly route: BodyRoute;
  readonly what: string;
  readonly body: unknown;
}

/** The volume plugin the tests configure on both sides (controller and socket proxy). */
export const TEST_VOLUME_DRIVER = 'capytestdriver';

/** The ids the bodies name networks by (the controller's containers join networks by id). */
export interface BodyNetworkIds {
  /** The shared network's. */
  readonly shared: string;
  /** A sandbox network's. */
  readonly sandbox: string;
}

/** Ids of the right shape, for the checks that do not ask dockerd (the Lua check alone). */
export const SOME_NETWORK_IDS: BodyNetworkIds = { shared: 'a'.repeat(64), sandbox: 'b'.repeat(64) };

/**
 * The bodies, with the deployment's shared network named `sharedNetwork` and `extraLabels` on
 * every resource (a test's run label), for sandbox ids starting with `idPrefix`, joining the
 * networks of `ids`.
 */
export function controllerBodies(sharedNetwork: string, extraLabels: Readonly<Record<string, string>>, idPrefix = 'bodies', ids = SOME_NETWORK_IDS): ControllerBody[] {
  const out: ControllerBody[] = [];
  const deployments: Array<{ name: string; config: Partial<DeploymentConfigInput> }> = [
    { name: 'defaults', config: {} },
    { name: 'runsc', config: { runtime: 'runsc' } },
    { name: 'volume plugin', config: { volumeDriver: TEST_VOLUME_DRIVER } },
    { name: 'largest log caps', config: { logMaxSizeMb: 100, logMaxFiles: 5 } },
    { name: 'smallest log caps', config: { logMaxSizeMb: 1, logMaxFiles: 1 } },
    { name: 'open egress allowed', config: { allowOpenEgress: true } },
    { name: 'smallest subnets', config: { subnetPrefix: 29 } },
    { name: 'largest subnets, another pool', config: { addressPool: '192.168.0.0/16', subnetPrefix: 24 } },
  ];
  // The persistent workspace's key carries idPrefix: a create that mounts a volume not made yet
  // makes it without labels, so only its name (a test's run id) lets the test's clean-up find it.
  const specs: Array<{ name: string; spec: Omit<SandboxSpec, 'id'>; needs?: keyof DeploymentConfigInput }> = [
    { name: 'none', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'none' } } },
    { name: 'internal', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'internal', cpu: 0.01, memoryMb: 6 } } },
    { name: 'allowlist', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', allowHosts: ['example.com', '*.pypi.org'] }, env: { A: 'b', LANG: 'C.UTF-8' } } },
    // cpu and memory at the default ceilings (maxLimits).
    { name: 'allowlist, empty list', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', cpu: 4, memoryMb: 16384 } } },
    { name: 'open', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'open' } }, needs: 'allowOpenEgress' },
    { name: 'persistent workspace', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', allowHosts: ['deb.debian.org'] }, workspace: { key: `proj-${idPrefix}`, durability: 'persistent' } } },
    { name: 'disk limit', spec: { image: 'capybara-sandbox:latest', limits: { egress: 'internal', diskMb: 100 } }, needs: 'volumeDriver' },
  ];
  let n = 0;
  for (const d of deployments) {
    const config = parseDeploymentConfig({ endpoint: 'unix:///run/capybara-sandbox/docker.sock', network: sharedNetwork, ...d.config });
    out.push({ route: 'network_create', what: `${d.name}: shared network`, body: sharedNetworkBody(config.network, extraLabels) });
    // A shard of the shared egress (allowlist sandboxes with egressIsolation shared) and its
    // registrations volume, as ensureShard makes them.
    const shard = { name: egressShardName(config.network, 7), index: 7, image: config.egressProxyImage, logCaps: config, nanoCpus: egressNanoCpus(config), labels: extraLabels };
    out.push({ route: 'volume_create', what: `${d.name}: shard's registrations volume`, body: volumeBody(shard.name, extraLabels, undefined, undefined) });
    out.push({ route: 'container_create', what: `${d.name}: shard of the shared egress`, body: egressShardBody(shard, ids.shared, undefined) });
    out.push({ route: 'container_create', what: `${d.name}: shard of the shared egress with test hosts`, body: egressShardBody(shard, ids.shared, { 'upstream.test': '10.0.0.5' }) });
    for (const s of specs) {
      if (s.needs !== undefined && d.config[s.needs] === undefined) continue;
      const plan = planSandbox({ id: `${idPrefix}${(n += 1)}`, ...s.spec }, config, { extraLabels });
      const what = `${d.name}, ${s.name}`;
      const network = plan.tier === 'open' ? ids.shared : ids.sandbox;
      const pool = parseAddressPool(config.addressPool, config.subnetPrefix);
      const addresses = sandboxSubnet(pool, subnetSlots(pool, plan.names.network).next().value ?? 0);
      // An allowlist sandbox's name server is its proxy's fixed address (transparent mode).
      const sandbox = sandboxContainerBody(plan, network, addresses.egressAddress);
      out.push({ route: 'container_create', what: `${what}: sandbox container`, body: sandbox });
      out.push({ route: 'container_create', what: `${what}: workspace hand-over container`, body: handoverContainerBody(plan.image, plan.workspaceVolume, plan.labels, plan.logCaps) });
      out.push({ route: 'container_create', what: `${what}: egress proxy`, body: egressContainerBody(plan, ids.shared, undefined, addresses.egressAddress) });
      out.push({ route: 'container_create', what: `${what}: egress proxy with test hosts`, body: egressContainerBody(plan, ids.shared, { 'upstream.test': '10.0.0.5' }, addresses.egressAddress) });
      // A network made before the address pool: no fixed address, so no transparent mode.
      out.push({ route: 'container_create', what: `${what}: egress proxy on a network without a subnet`, body: egressContainerBody(plan, ids.shared, undefined) });
      // resume after the network went: the container is rebuilt from what inspect gives back
      // (Docker adds its defaults; the controller copies only what it set).
      const inspected = {
        image: sandbox.Image, user: sandbox.User ?? '', workingDir: sandbox.WorkingDir ?? '',
        env: sandbox.Env, labels: sandbox.Labels,
        hostConfig: {
          ...sandbox.HostConfig, Binds: null, Privileged: false, CgroupnsMode: 'host', OomKillDisable: false,
          RestartPolicy: { Name: 'no', MaximumRetryCount: 0 }, LogConfig: { Type: 'json-file', Config: {} },
          Mounts: (sandbox.HostConfig.Mounts as object[]).map((m) => ({ ...m, VolumeOptions: {} })),
        },
      };
      const dns = plan.tier === 'allowlist' ? addresses.egressAddress : undefined;
      out.push({ route: 'container_create', what: `${what}: sandbox rebuilt from inspect`, body: sandboxBodyFromInspect(inspected, config, plan.tier === 'none' ? 'none' : network, dns) });
      out.push({ route: 'network_create', what: `${what}: internal network`, body: internalNetworkBody(plan.names.network, plan.labels, addresses) });
      out.push({ route: 'network_connect', what: `${what}: egress proxy's second leg`, body: networkConnectBody(plan.names.egress, addresses.egressAddress) });
      // A network made before the address pool has no subnet of its own: the leg takes any address.
      out.push({ route: 'network_connect', what: `${what}: egress proxy's second leg, network without a subnet`, body: networkConnectBody(plan.names.egress, undefined) });
      // A sandbox taken off its network is put back on it, with a dynamic address.
      out.push({ route: 'network_connect', what: `${what}: sandbox back on its network`, body: networkConnectBody(plan.names.container, undefined) });
      if (plan.tier === 'allowlist') {
        // A shard of the shared egress serving the sandbox: its leg at the proxy's fixed address,
        // with the sandbox's egress proxy name as its alias; taken off before the network goes.
        for (const k of [0, 99]) {
          const shard = egressShardName(config.network, k);
          out.push({ route: 'network_connect', what: `${what}: shard ${k}'s leg`, body: networkConnectBody(shard, addresses.egressAddress, plan.names.egress) });
          out.push({ route: 'network_disconnect', what: `${what}: shard ${k}'s leg taken off`, body: networkDisconnectBody(shard) });
        }
      }
      out.push({ route: 'volume_create', what: `${what}: skills volume`, body: volumeBody(plan.names.skillsVolume, plan.labels, undefined, undefined) });
      out.push({
        route: 'volume_create', what: `${what}: workspace volume`,
        body: volumeBody(plan.workspaceVolume, plan.persistentWorkspace?.labels ?? plan.labels, plan.volumeDriver, plan.limits.volumeSize),
      });
    }
  }
  out.push(...credentialBodies(sharedNetwork, extraLabels, idPrefix, ids));
  const mark = execMark('default', '00000000-0000-4000-8000-000000000000');
  const scripts: Array<{ name: string; cmd: readonly string[]; user: string; env?: readonly string[]; stdin?: Uint8Array }> = [
    // As commands.ts runs them: marked, the script base64-encoded inline, or on stdin ("-N").
    { name: 'command', cmd: wrapperCmd(65, encodeArg(commandPayload('echo héllo; exit 7', { X: 'ü' }, '/workspace/sub')), 'landlock'), user: SANDBOX_USER, env: execMarkEnv(mark) },
    { name: 'largest inline command', cmd: wrapperCmd(86_405, encodeArg('x'.repeat(MAX_INLINE_PAYLOAD * 3 / 4)), 'landlock'), user: SANDBOX_USER, env: execMarkEnv(mark) },
    { name: 'command with stdin', cmd: wrapperCmd(65, encodeArg(commandPayload('cat', {}, undefined)), 'landlock'), user: SANDBOX_USER, env: execMarkEnv(mark), stdin: new Uint8Array([1, 2]) },
    { name: 'command on stdin', cmd: wrapperCmd(65, '-40000', 'landlock'), user: SANDBOX_USER, env: execMarkEnv(mark), stdin: new Uint8Array([1]) },
    // A terminal is the wrapper's (script(1) in the sandbox), never Docker's Tty.
    { name: 'command on a terminal', cmd: wrapperCmd(65, encodeArg(commandPayload('vim', {}, undefined, { rows: 30, cols: 100, echo: true })), 'landlock', true), user: SANDBOX_USER, env: execMarkEnv(mark), stdin: new Uint8Array([1]) },
    { name: 'kill one command', cmd: killMarkedCmd([mark]), user: SANDBOX_USER },
    { name: 'kill by tag', cmd: killTaggedCmd(['default', 'build']), user: SANDBOX_USER },
    { name: 'kill all', cmd: killAllCmd(), user: SANDBOX_USER },
    { name: 'read file', cmd: readFileCmd('/workspace/a.txt', 1024), user: SANDBOX_USER },
    { name: 'write file', cmd: writeFileCmd('/workspace/a.txt'), user: SANDBOX_USER, stdin: new Uint8Array([1]) },
    { name: 'write a skill', cmd: writeFileCmd('/opt/capybara/skills/s.md', '/opt/capybara/skills'), user: ROOT_USER, stdin: new Uint8Array([1]) },
    { name: 'stat', cmd: statCmd('/workspace'), user: SANDBOX_USER },
    // As files.ts runs them with commandIsolation landlock: each in a domain of its own.
    { name: 'read file, isolated', cmd: isolatedFileCmd(readFileCmd('/workspace/a.txt', 1024), 'landlock'), user: SANDBOX_USER },
    { name: 'write a skill, isolated', cmd: isolatedFileCmd(writeFileCmd('/opt/capybara/skills/s.md', '/opt/capybara/skills'), 'landlock'), user: ROOT_USER, stdin: new Uint8Array([1]) },
  ];
  for (const s of scripts) {
    out.push({ route: 'exec_create', what: `exec: ${s.name}`, body: execCreateBody({ cmd: s.cmd, user: s.user, env: s.env, stdin: s.stdin }) });
  }
  out.push({ route: 'exec_start', what: 'exec start', body: EXEC_START_BODY });
  return out;
}

/**
 * A sandbox with an inspected entry and a secret (the deployment CA and the value stand-ins of
 * their real shapes): its container (the CA tmpfs, the idle process that writes the CA, the
 * placeholders and trust variables), its proxy (EGRESS_POLICY_JSON, the CA, the value, the
 * placeholder; and in report mode, as run --report makes it) and the container rebuilt.
 */
function credentialBodies(sharedNetwork: string, extraLabels: Readonly<Record<string, string>>, idPrefix: string, ids: BodyNetworkIds): ControllerBody[] {
  const config = parseDeploymentConfig({
    endpoint: 'unix:///run/capybara-sandbox/docker.sock', network: sharedNetwork, stateDir: '/var/lib/capybara-sandbox',
    inspectHosts: ['*.npmjs.org'], secrets: [{ name: 'GITHUB_TOKEN', hosts: ['api.github.com'], header: 'Authorization', format: 'Bearer {}' }],
  });
  const base = planSandbox({ id: `${idPrefix}cred`, image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', allowHosts: ['api.github.com', '*.npmjs.org', 'pypi.org'] } }, config, { extraLabels });
  const pem = (label: string): string => `-----BEGIN ${label}-----\n${'A'.repeat(64)}\n${'B'.repeat(40)}\n-----END ${label}-----\n`;
  const credentials = sandboxCredentials({
    allowHosts: base.allowHosts,
    caCertificatePem: pem('CERTIFICATE'),
    caInline: Buffer.from(pem('CERTIFICATE') + pem('PRIVATE KEY')).toString('base64'),
    secrets: [{ config: config.secrets![0]!, value: `ghp_${'a1'.repeat(18)}`, placeholder: `ghp_${'Zq'.repeat(18)}` }],
  }, config);
  const plan = withCredentials(base, credentials);
  const pool = parseAddressPool(config.addressPool, config.subnetPrefix);
  const addresses = sandboxSubnet(pool, subnetSlots(pool, plan.names.network).next().value ?? 0);
  const sandbox = sandboxContainerBody(plan, ids.sandbox, addresses.egressAddress);
  const inspected = { image: sandbox.Image, user: sandbox.User ?? '', workingDir: sandbox.WorkingDir ?? '', env: sandbox.Env, labels: sandbox.Labels, hostConfig: { ...sandbox.HostConfig } };
  return [
    { route: 'container_create', what: 'credentials: sandbox container', body: sandbox },
    { route: 'container_create', what: 'credentials: egress proxy', body: egressContainerBody(plan, ids.shared, undefined, addresses.egressAddress) },
    { route: 'container_create', what: 'credentials: egress proxy in report mode', body: egressContainerBody(plan, ids.shared, undefined, addresses.egressAddress, 'report') },
    { route: 'container_create', what: 'credentials: sandbox rebuilt from inspect', body: sandboxBodyFromInspect(inspected, config, ids.sandbox, addresses.egressAddress) },
  ];
}
