/**
 * Setup shared by the controller's Docker tests: the engine (skip/fail rules of docker.ts), the
 * images, the real socket proxy, a shared network, an upstream HTTP server the allowlist tier
 * may reach (pinned through egressTestHosts), and the provider under test.
 *
 * The shared network is created here with inter-container traffic ON, unlike the controller's
 * default: the upstream lives on it and egress proxies must reach it. Sandboxes never join it
 * except in the open tier.
 */
import type { Test } from 'tap';
import type Docker from 'dockerode';
import { Writable } from 'node:stream';
import pino from 'pino';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE, type DockerTestEnv, type SocketProxy } from './docker.js';
import { createDockerSandbox } from '../../controller/index.js';
import { IMAGES } from '../../common/index.js';
import type { DockerSandboxProvider, SandboxProvider } from '../../controller/index.js';

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

export async function sandboxTestEnv(t: Test): Promise<SandboxTestEnv | null> {
  const env = await dockerTest(t, [SANDBOX_IMAGE, EGRESS_IMAGE, SOCKET_PROXY_IMAGE]);
  if (!env) return null;
  const proxy = await startSocketProxy(t, env);
  const sharedNetwork = env.name('shared');
  await env.docker.createNetwork({ Name: sharedNetwork, Driver: 'bridge', Labels: env.labels, CheckDuplicate: true });
  const upstreamIp = await startUpstream(env, sharedNetwork);
  const config = { endpoint: proxy.endpoint, network: sharedNetwork };
  const testOptions = { labels: env.labels, egressTestHosts: { [UPSTREAM_HOST]: upstreamIp } };
  const logs: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') logs.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
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

/** A plain HTTP server on port 80 of the shared network (test-created, so tests may reach it). */
async function startUpstream(env: DockerTestEnv, network: string): Promise<string> {
  const name = env.name('upstream');
  const script = `mkdir -p /tmp/www && printf '%s' '${UPSTREAM_BODY}' > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 80 --bind 0.0.0.0`;
  const container = await env.docker.createContainer({
    name,
    Image: SANDBOX_IMAGE,
    User: '0:0',
    Entrypoint: ['bash', '-c', script],
    Labels: env.labels,
    HostConfig: { NetworkMode: network, CapDrop: ['ALL'], CapAdd: ['NET_BIND_SERVICE'] },
  });
  await container.start();
  const info = await container.inspect();
  const ip = info.NetworkSettings.Networks[network]?.IPAddress;
  if (!ip) throw new Error(`upstream ${name} has no address on ${network}`);
  return ip;
}
