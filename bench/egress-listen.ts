/**
 * How long the egress image takes to answer once Docker has started it, outside the controller:
 * `docker run -d` of the image on a plain bridge network, then GET /healthz from the host every
 * few milliseconds until it answers 200. Splits the time into what `docker run -d` takes and what
 * the proxy process adds after it returns, which is the part of a sandbox create that no change
 * to the controller's sequence can remove. The same image running a bare Node HTTP server
 * instead of the proxy is the floor of that part: what Node itself costs in that container.
 */
import http from 'node:http';
import type Docker from 'dockerode';
import { EGRESS_ENV, EGRESS_HEALTH_PATH, EGRESS_PROXY_PORT } from '../common/index.js';

const POLL_MS = 2;

/** A server that answers every request 200 on the proxy port: the Node floor. */
const BARE_NODE_SERVER = `require('http').createServer((q, s) => s.end('ok')).listen(${EGRESS_PROXY_PORT})`;
const DEADLINE_MS = 15_000;

export interface ListenSample {
  /** `docker run -d` until it returned. */
  readonly runMs: number;
  /** From its return until /healthz answered 200. */
  readonly afterRunMs: number;
}

function healthStatus(address: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.get({ host: address, port: EGRESS_PROXY_PORT, path: EGRESS_HEALTH_PATH, timeout: 500, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => {
      req.destroy();
      resolve(0);
    });
  });
}

/**
 * One start of `image` named `name` on `network` (a bridge the host has an address on), running
 * the proxy or, with `bareNode`, the bare server. `docker` runs the CLI; `engine` finds the
 * container's address without a second CLI start.
 */
export async function egressStartToListening(
  docker: (...args: string[]) => Promise<string>,
  engine: Docker,
  options: { image: string; name: string; network: string; label: string; bareNode?: boolean },
): Promise<ListenSample> {
  const what = options.bareNode === true ? ['--entrypoint', 'node', options.image, '-e', BARE_NODE_SERVER] : [options.image];
  const started = performance.now();
  await docker('run', '-d', '--name', options.name, '--label', options.label, '--network', options.network,
    '-e', `${EGRESS_ENV.allowHosts}=example.com`, ...what);
  const returned = performance.now();
  const info = await engine.getContainer(options.name).inspect();
  const address = info.NetworkSettings.Networks[options.network]?.IPAddress ?? '';
  if (address === '') throw new Error(`${options.name} has no address on ${options.network}`);
  for (;;) {
    if ((await healthStatus(address)) === 200) break;
    if (performance.now() - returned > DEADLINE_MS) throw new Error(`${options.name} did not answer ${EGRESS_HEALTH_PATH} within ${DEADLINE_MS} ms`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  return { runMs: returned - started, afterRunMs: performance.now() - returned };
}
