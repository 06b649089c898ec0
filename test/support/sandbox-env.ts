/**
 * Setup shared by the controller's Docker tests: the engine (skip/fail rules of docker.ts), the
 * images, the real socket proxy, a shared network, an upstream HTTP server the allowlist tier
 * may reach (pinned through egressTestHosts), and the provider under test.
 *
 * The shared network is created here as the controller makes it (inter-container traffic off: the
 * controller refuses one without that). The upstream therefore does not live on it but on the host,
 * bound to that network's gateway address only: what a container on the network reaches without
 * crossing the bridge, as egress proxies reach the Internet through it. Sandboxes never join it
 * except in the open tier.
 */
import type { Test } from 'tap';
import type Docker from 'dockerode';
import pino from 'pino';
import { connect } from 'node:net';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE, TEST_PROXY_IMAGES, type DockerTestEnv, type SocketProxy } from './docker.js';
import { createDockerSandbox, type DockerSandboxProvider, type SandboxProvider } from '../../controller/index.js';
import { IMAGES } from '../../common/index.js';
import { captureLogs } from './log-capture.js';

export const SANDBOX_IMAGE = IMAGES.sandbox;
export const EGRESS_IMAGE = IMAGES.egress;
export const UPSTREAM_HOST = 'upstream.capybara.test';
export const UPSTREAM_BODY = 'hello from the allowlisted upstream';

export interface SandboxTestEnv {
  env: DockerTestEnv;
  proxy: SocketProxy;
  provider: DockerSandboxProvider;
  openProvider: SandboxProvider;
  sharedNetwork: string;
  upstreamIp: string;
  /** Every log record `provider` wrote (warn and above), parsed: what the controller reports. */
  logs: Record<string, unknown>[];
  /** `docker inspect` of a container, straight from the engine. */
  inspect(name: string): Promise<Docker.ContainerInspectInfo>;
  /** Names of every container, network and volume labelled with this sandbox name. */
  labelled(name: string): Promise<string[]>;
}

/** `images`: more images the socket proxy admits (a test's own build, named by the run's id). */
export async function sandboxTestEnv(t: Test, images: (runId: string) => readonly string[] = () => []): Promise<SandboxTestEnv | null> {
  const env = await dockerTest(t, [SANDBOX_IMAGE, EGRESS_IMAGE, SOCKET_PROXY_IMAGE]);
  if (!env) return null;
  const proxy = await startSocketProxy(t, env, { images: [...TEST_PROXY_IMAGES, ...images(env.runId)] });
  const sharedNetwork = env.name('shared');
  await env.docker.createNetwork({
    Name: sharedNetwork, Driver: 'bridge', Labels: env.labels, CheckDuplicate: true, Options: { 'com.docker.network.bridge.enable_icc': 'false' },
  });
  const upstreamIp = await startUpstream(env, sharedNetwork);
  // A proxy of its own per allowlist sandbox: the suites that use `provider` test that container
  // (its hardening, its rebuild, its log). The shared egress, the deployment default, has suites of
  // its own (docker-shared-egress, docker-isolation, docker-warm-networks, doctor).
  const config = { endpoint: proxy.endpoint, network: sharedNetwork, egressIsolation: 'sandbox' as const };
  const testOptions = { labels: env.labels, egressTestHosts: { [UPSTREAM_HOST]: upstreamIp } };
  const { logs, sink } = captureLogs();
  const provider = createDockerSandbox(config, testOptions, { logger: pino({ level: 'warn' }, sink) });
  const openProvider = createDockerSandbox({ ...config, allowOpenEgress: true }, testOptions);
  return {
    env,
    proxy,
    provider,
    openProvider,
    sharedNetwork,
    upstreamIp,
    logs,
    inspect: (name) => env.docker.getContainer(name).inspect(),
    labelled: async (name) => {
      const filters = { label: [`dev.capybara.sandbox.name=${name}`] };
      const containers = await env.docker.listContainers({ all: true, filters });
      const networks = await env.docker.listNetworks({ filters });
      const { Volumes } = await env.docker.listVolumes({ filters });
      return [
        ...containers.map((c) => c.Names.join(',')),
        ...networks.map((n) => n.Name),
        ...(Volumes ?? []).map((v) => v.Name),
      ];
    },
  };
}

/** The host's address on a test-made network (its bridge's gateway). */
export async function gatewayOf(env: DockerTestEnv, network: string): Promise<string> {
  const info = await env.docker.getNetwork(network).inspect() as { IPAM?: { Config?: Array<{ Gateway?: string }> } };
  const gateway = info.IPAM?.Config?.[0]?.Gateway;
  if (gateway === undefined || gateway === '') throw new Error(`network ${network} has no gateway address`);
  return gateway;
}

/**
 * A plain HTTP server on port 80 of the shared network's gateway address (test-created, so tests
 * may reach it): in the host's network namespace, bound to that address alone.
 */
async function startUpstream(env: DockerTestEnv, network: string): Promise<string> {
  const name = env.name('upstream');
  const gateway = await gatewayOf(env, network);
  const script = `mkdir -p /tmp/www && printf '%s' '${UPSTREAM_BODY}' > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 80 --bind ${gateway}`;
  const container = await env.docker.createContainer({
    name,
    Image: SANDBOX_IMAGE,
    User: '0:0',
    Entrypoint: ['bash', '-c', script],
    Labels: env.labels,
    HostConfig: { NetworkMode: 'host', CapDrop: ['ALL'], CapAdd: ['NET_BIND_SERVICE'] },
  });
  await container.start();
  await untilListening(name, gateway, 80);
  return gateway;
}

/**
 * Waits (at most 30 s) until the server in container `name` accepts on address:port. A readiness
 * wait, not a measure: the transparent test's server makes a git repository before it listens,
 * a few seconds on a loaded machine.
 */
export async function untilListening(name: string, address: string, port: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: address, port, timeout: 500 }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
      socket.on('timeout', () => {
        socket.destroy();
        resolve(false);
      });
    });
    if (up) return;
    if (Date.now() > deadline) throw new Error(`${name} does not listen on ${address}:${port}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
