/**
 * The isolation proof run inside a sandbox (the same method as the controller's isolation
 * test). The probe reads the sandbox's routing table and connects to a target only when there
 * is no route to it (the kernel refuses locally) or only the default route through a gateway
 * nobody holds (ARP goes unanswered, so nothing leaves the sandbox's own bridge). Anything
 * else is reported ROUTABLE and never contacted: the proof cannot send traffic anywhere.
 */
export const ISOLATION_PROBE = String.raw`
import socket, struct, sys, errno, threading
phantom = set(g for g in sys.argv[1].split(',') if g)
routes = []
for line in open('/proc/net/route').read().splitlines()[1:]:
    f = line.split()
    routes.append((int(f[1], 16), int(f[7], 16), socket.inet_ntoa(struct.pack('<I', int(f[2], 16)))))
def route(ip):
    n = struct.unpack('<I', socket.inet_aton(ip))[0]
    hits = [r for r in routes if (n & r[1]) == r[0]]
    return max(hits, key=lambda r: bin(r[1]).count('1')) if hits else None
out = {}
def attempt(target):
    ip, port = target.rsplit(':', 1)
    r = route(ip)
    if r is not None and not (r[1] == 0 and r[2] in phantom):
        out[target] = 'ROUTABLE'
        return
    s = socket.socket()
    s.settimeout(8)
    try:
        s.connect((ip, int(port)))
        out[target] = 'CONNECTED'
    except socket.timeout:
        out[target] = 'unreachable timeout'
    except OSError as e:
        out[target] = 'unreachable ' + errno.errorcode.get(e.errno, str(e.errno))
threads = [threading.Thread(target=attempt, args=(t,)) for t in sys.argv[2:]]
for t in threads: t.start()
for t in threads: t.join()
for t in sys.argv[2:]: print(t, out.get(t))
`;

/** The probe as one bash command; the script travels in the environment variable PROBE. */
export function probeCommand(phantomGateways: readonly string[], targets: readonly string[]): string {
  return `python3 -c "$PROBE" ${phantomGateways.join(',') || '-'} ${targets.join(' ')}`;
}

export interface ProbeVerdict {
  readonly target: string;
  readonly isolated: boolean;
  readonly result: string;
}

/** One verdict per target; a target missing from the output counts as not isolated. */
export function readProbeOutput(stdout: string, targets: readonly string[]): ProbeVerdict[] {
  const lines = new Map(stdout.trim().split('\n').map((line) => {
    const space = line.indexOf(' ');
    return [line.slice(0, space), line.slice(space + 1)] as const;
  }));
  return targets.map((target) => {
    const result = lines.get(target) ?? 'no result';
    return { target, result, isolated: /^unreachable (ENETUNREACH|EHOSTUNREACH|timeout)$/.test(result) };
  });
}
