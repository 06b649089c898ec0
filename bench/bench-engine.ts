/**
 * What the controller benches share on the local engine: a socket proxy of their own (the
 * controller's only way to the engine) and the removal of everything a run labelled.
 */
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { IMAGES, SOCKET_PROXY_ENV } from '../common/index.js';

export const BENCH_LABEL = 'dev.capybara.bench';

export async function startSocketProxy(engine: Docker, runId: string): Promise<{ endpoint: string; stop: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), `cap-${runId}-`));
  // Never a cap- name: the socket proxy admits exec into cap- containers (SECURITY.md, section 2).
  const name = `capybara-bench-${runId}-sockproxy`;
  const container = await engine.createContainer({
    _query: { name },
    _body: {
      Image: process.env.CAPYBARA_BENCH_PROXY_IMAGE ?? IMAGES.proxy,
      Labels: { [BENCH_LABEL]: runId },
      Env: [
        `${SOCKET_PROXY_ENV.bind}=unix@/run/capybara-proxy/docker.sock`,
        `${SOCKET_PROXY_ENV.dockerSocket}=/var/run/docker.sock`,
        `${SOCKET_PROXY_ENV.sharedNetwork}=cap-${runId}-shared`,
      ],
      HostConfig: {
        Binds: ['/var/run/docker.sock:/var/run/docker.sock', `${dir}:/run/capybara-proxy`],
        NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true,
      },
    },
  } as unknown as Docker.ContainerCreateOptions);
  await container.start();
  const socket = join(dir, 'docker.sock');
  for (let i = 0; i < 150 && !existsSync(socket); i += 1) await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, 300));
  return {
    endpoint: `unix://${socket}`,
    stop: async () => {
      await container.remove({ force: true }).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Removes every container, network and volume labelled with this run. */
export async function removeLabelled(engine: Docker, runId: string): Promise<void> {
  const filters = { label: [`${BENCH_LABEL}=${runId}`] };
  for (const c of await engine.listContainers({ all: true, filters })) await engine.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined);
  for (const n of await engine.listNetworks({ filters })) await engine.getNetwork(n.Id).remove().catch(() => undefined);
  const { Volumes } = await engine.listVolumes({ filters });
  for (const v of Volumes ?? []) await engine.getVolume(v.Name).remove({ force: true }).catch(() => undefined);
}
