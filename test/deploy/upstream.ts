/**
 * The test's stand-in for a host on the Internet: HTTP on 80 and HTTPS on 443 (a throwaway
 * certificate, which the clients do not check: the proxy never looks inside TLS), answering every
 * GET with UPSTREAM_TEXT, on a network the test creates. As a compose override (the egress proxy
 * told, through the egress image's test variable filled from TEST_HOSTS, to pin allowlisted names
 * to it), or as a container started by hand.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { stringify } from 'yaml';
import { EGRESS_ENV, IMAGES } from '../../common/index.js';
import { selfSignedCert } from '../support/tls-cert.js';

export const UPSTREAM_TEXT = 'hello from the test upstream';

const SERVER = `
import http.server, ssl, threading
BODY = ${JSON.stringify(UPSTREAM_TEXT)}.encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Length', str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
def serve(port, tls):
    server = http.server.ThreadingHTTPServer(('0.0.0.0', port), Handler)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain('/certs/cert.pem', '/certs/key.pem')
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
threading.Thread(target=serve, args=(443, True), daemon=True).start()
serve(80, False)
`;

/** Writes a certificate for the upstream into `dir` (mounted at /certs), readable by anyone. */
export function writeUpstreamCert(dir: string): void {
  const { key, cert } = selfSignedCert(['deb.debian.org', 'example.com']);
  writeFileSync(join(dir, 'key.pem'), key, { mode: 0o644 });
  writeFileSync(join(dir, 'cert.pem'), cert, { mode: 0o644 });
}

const upstreamProcess = { image: IMAGES.sandbox, user: '0:0', entrypoint: ['python3', '-c', SERVER] };

export function upstreamOverride(network: string, proxyService: string, certDir: string): string {
  return stringify({
    services: {
      [proxyService]: { environment: { [EGRESS_ENV.testHosts]: '${TEST_HOSTS}' } },
      upstream: {
        ...upstreamProcess,
        cap_drop: ['ALL'],
        cap_add: ['NET_BIND_SERVICE'],
        volumes: [{ type: 'bind', source: certDir, target: '/certs', read_only: true }],
        networks: [network],
      },
    },
    // The example turns inter-container traffic off on its outside network; the proxy must
    // reach the upstream there.
    networks: { [network]: { driver_opts: { 'com.docker.network.bridge.enable_icc': 'true' } } },
  });
}

/** Starts the upstream as a container `name` on `network`; resolves with its address there. */
export async function startUpstream(docker: Docker, name: string, network: string, labels: Record<string, string>, certDir: string): Promise<string> {
  const c = await docker.createContainer({
    name,
    Image: upstreamProcess.image,
    User: upstreamProcess.user,
    Entrypoint: upstreamProcess.entrypoint,
    Labels: labels,
    HostConfig: { NetworkMode: network, CapDrop: ['ALL'], CapAdd: ['NET_BIND_SERVICE'], Binds: [`${certDir}:/certs:ro`] },
  });
  await c.start();
  const ip = (await c.inspect()).NetworkSettings.Networks[network]?.IPAddress;
  if (!ip) throw new Error(`upstream ${name} has no address on ${network}`);
  return ip;
}

/** Where testSubnet picks from: clear of every default range (default-ranges.test.ts checks it). */
export const TEST_SUBNETS = '10.224.0.0/11';

/** A subnet of TEST_SUBNETS for a test's workload network (/24), its gateway and the proxy's address. */
export function testSubnet(): { subnet: string; gateway: string; address: string } {
  const prefix = `10.${224 + Math.floor(Math.random() * 32)}.${Math.floor(Math.random() * 256)}`;
  return { subnet: `${prefix}.0/24`, gateway: `${prefix}.1`, address: `${prefix}.2` };
}

/** A command that prints EPERM when the container may not open a raw socket (NET_RAW dropped), else "opened". */
export const RAW_SOCKET = `python3 -c 'import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    print("opened")
except PermissionError:
    print("EPERM")'`;
