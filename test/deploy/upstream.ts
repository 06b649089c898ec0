/**
 * The test's stand-in for a host on the Internet, as a compose override: a plain HTTP server on
 * a network the test's own compose project creates, and the egress proxy told (through the
 * egress image's test variable, filled from TEST_HOSTS) to pin allowlisted names to it.
 */
import { stringify } from 'yaml';
import { EGRESS_ENV, IMAGES } from '../../common/index.js';

export const UPSTREAM_TEXT = 'hello from the test upstream';

export function upstreamOverride(network: string, proxyService: string): string {
  const script = `mkdir -p /tmp/www && printf '%s' '${UPSTREAM_TEXT}' > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 80 --bind 0.0.0.0`;
  return stringify({
    services: {
      [proxyService]: { environment: { [EGRESS_ENV.testHosts]: '${TEST_HOSTS}' } },
      upstream: {
        image: IMAGES.sandbox,
        user: '0:0',
        entrypoint: ['bash', '-c', script],
        cap_drop: ['ALL'],
        cap_add: ['NET_BIND_SERVICE'],
        networks: [network],
      },
    },
    // The example turns inter-container traffic off on its outside network; the proxy must
    // reach the upstream there.
    networks: { [network]: { driver_opts: { 'com.docker.network.bridge.enable_icc': 'true' } } },
  });
}
