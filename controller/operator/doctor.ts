/**
 * `doctor`: checks one deployment the way the controller will use it, through its configured
 * endpoint, and says for each check what to do when it fails. It creates one throwaway
 * sandbox (allowlist tier, one reserved .invalid host allowed) and always removes it again.
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { type DeploymentConfig, type SandboxHandle, type SandboxProvider, isSandboxError, sandboxNetworkName } from '../spec/index.js';
import { type DockerEngine, engineStatus, imageRefusal, parseEndpoint } from '../docker/index.js';
import { ISOLATION_PROBE, probeCommand, readProbeOutput } from './isolation-probe.js';
import type { SandboxRow } from './inventory.js';
import { escapeText } from './decision-format.js';

export const DOCTOR_CHECKS = {
  engine_reachable: 'The endpoint answers (over mTLS when tlsCertDir is set).',
  socket_proxy_refuses: 'The endpoint refuses a forbidden call (a privileged container create).',
  images_present: 'The sandbox and egress proxy images are on the engine.',
  shared_network_icc_off: 'The shared network has inter-container traffic off.',
  runtime_usable: 'A sandbox starts with the configured runtime and runs a command.',
  isolation: 'Inside an allowlist sandbox: no metadata service, no socket proxy, no direct route out; the egress proxy refuses unlisted hosts.',
  transparent_egress: 'Inside that sandbox, with no proxy settings: its name server is its egress proxy, an allowlisted name resolves to the proxy, an unlisted one fails at once (NXDOMAIN), and the proxy takes plain HTTP by Host.',
  sandboxes_egress: 'Every sandbox with an egress proxy has it running on the sandbox\'s network (listed through the engine on this host).',
} as const;
export type DoctorCheckId = keyof typeof DOCTOR_CHECKS;

export interface DoctorCheck {
  readonly check: DoctorCheckId;
  readonly status: 'pass' | 'fail' | 'skip';
  readonly detail: string;
  readonly fix?: string;
}

export interface DoctorOptions {
  readonly config: DeploymentConfig;
  readonly engine: DockerEngine;
  readonly provider: SandboxProvider;
  readonly image: string;
  readonly labels: Readonly<Record<string, string>>;
  /**
   * The sandboxes as `ls` lists them, through the engine itself (the socket proxy refuses listing
   * by design); undefined when this host has no engine of the deployment to ask.
   */
  readonly listSandboxes: (() => Promise<readonly SandboxRow[]>) | undefined;
  /** Told of each check as it finishes, in the order they run (the CLI prints it at once). */
  readonly onCheck?: (check: DoctorCheck) => void;
}

/** A documentation-range address (RFC 5737): stands for "anywhere outside". */
const OUTSIDE_TARGET = '192.0.2.1:443';
const METADATA_TARGET = '169.254.169.254:80';
/** The egress proxy refuses to start with an empty allowlist; this reserved name (RFC 2606) is never resolved. */
const DOCTOR_ALLOWED_HOST = 'doctor.capybara.invalid';

function clientCertSummary(tlsCertDir: string): string {
  try {
    const cert = new X509Certificate(readFileSync(join(tlsCertDir, 'cert.pem')));
    return ` over mTLS (client certificate "${cert.subject.replace(/\n/g, ', ')}", valid until ${new Date(cert.validTo).toISOString()})`;
  } catch {
    return ' over mTLS';
  }
}

async function checkEngine(o: DoctorOptions): Promise<DoctorCheck> {
  try {
    await o.engine.ping();
    const tls = o.config.tlsCertDir === undefined ? '' : clientCertSummary(o.config.tlsCertDir);
    return { check: 'engine_reachable', status: 'pass', detail: `${o.config.endpoint} answered${tls}.` };
  } catch (err) {
    const fix = isSandboxError(err, 'engine_tls')
      ? 'Fix the certificates as the message says; the engine must trust the CA that issued cert.pem.'
      : 'Start the socket proxy (deploy/compose.yaml) or the engine, and check the endpoint address.';
    return { check: 'engine_reachable', status: 'fail', detail: (err as Error).message, fix };
  }
}

async function checkProxyRefuses(o: DoctorOptions): Promise<DoctorCheck> {
  const name = `cap-doctor-${randomBytes(4).toString('hex')}-privileged`;
  const body = { Image: o.image, Cmd: ['true'], Labels: { ...o.labels }, HostConfig: { Privileged: true, NetworkMode: 'none' } };
  const fix = 'Point endpoint at the socket proxy (haproxy/, deploy/compose.yaml), never at the engine itself; a remote engine over mTLS needs the socket proxy in front of it on its host.';
  try {
    await o.engine.createContainer(name, body);
  } catch (err) {
    if (engineStatus(err) === 403) return { check: 'socket_proxy_refuses', status: 'pass', detail: 'A privileged container create was refused with 403.' };
    return { check: 'socket_proxy_refuses', status: 'fail', detail: `A privileged container create was not refused by a proxy: ${(err as Error).message}`, fix };
  }
  // Created, never started: remove it at once.
  await o.engine.removeContainer(name).catch(() => undefined);
  return { check: 'socket_proxy_refuses', status: 'fail', detail: `The endpoint accepted a privileged container create (${name}, removed again): it is the engine itself, not the socket proxy.`, fix };
}

async function checkImages(o: DoctorOptions): Promise<DoctorCheck> {
  const images = [o.image, o.config.egressProxyImage];
  const missing: string[] = [];
  for (const image of images) {
    // The socket proxy refuses even an inspect of an image it does not admit (image_not_allowed).
    const exists = await o.engine.imageExists(image).catch((err: unknown) => {
      const refused = imageRefusal(err);
      if (refused === undefined) throw err;
      return `refused by the socket proxy: ${refused}`;
    });
    if (exists !== true) missing.push(exists === false ? image : `${image} (${exists})`);
  }
  if (missing.length === 0) return { check: 'images_present', status: 'pass', detail: `${images.join(', ')} present.` };
  return {
    check: 'images_present',
    status: 'fail',
    detail: `Missing: ${missing.join(', ')}.`,
    fix: 'Build them on every engine node (bash scripts/build-images.sh) or load them there: the socket proxy pulls only images listed in its SOCKET_PROXY_IMAGES or of a registry in SOCKET_PROXY_REGISTRIES (none by default).',
  };
}

async function checkSharedNetwork(o: DoctorOptions): Promise<DoctorCheck> {
  const network = await o.engine.inspectNetwork(o.config.network);
  if (network === undefined) {
    return { check: 'shared_network_icc_off', status: 'pass', detail: `${o.config.network} does not exist yet; the controller creates it with inter-container traffic off.` };
  }
  if (network.options['com.docker.network.bridge.enable_icc'] === 'false') {
    return { check: 'shared_network_icc_off', status: 'pass', detail: `${o.config.network} has inter-container traffic off.` };
  }
  return {
    check: 'shared_network_icc_off',
    status: 'fail',
    detail: `${o.config.network} allows inter-container traffic: egress proxies (and open-tier sandboxes) of different conversations can reach each other.`,
    fix: `When no sandbox uses it, remove it (docker network rm ${o.config.network}) and let the controller recreate it, or create it with -o com.docker.network.bridge.enable_icc=false.`,
  };
}

/** Socket proxy address as seen from the engine host side, when it is a tcp endpoint. */
async function proxyTarget(endpoint: string): Promise<string | undefined> {
  const address = parseEndpoint(endpoint);
  if (address.kind !== 'tcp') return undefined;
  const ip = isIP(address.host) === 4 ? address.host : await lookup(address.host, { family: 4 }).then((r) => r.address, () => undefined);
  return ip === undefined ? undefined : `${ip}:${address.port}`;
}

async function checkIsolation(o: DoctorOptions, h: SandboxHandle): Promise<DoctorCheck> {
  // The network the throwaway sandbox is on: its own, or a warm network it was made on.
  const sandbox = await o.engine.inspectContainer(h.id);
  const network = await o.engine.inspectNetwork(sandboxNetworkName(h.id, sandbox?.labels ?? {}));
  const members = new Set(network?.members.map((m) => m.ipv4) ?? []);
  // A gateway is phantom only on an internal bridge without a host address that no member holds.
  const phantom = network !== undefined && network.internal && network.options['com.docker.network.bridge.inhibit_ipv4'] === 'true'
    ? network.gateways.filter((g) => !members.has(g))
    : [];
  const proxy = await proxyTarget(o.config.endpoint);
  const targets = [METADATA_TARGET, OUTSIDE_TARGET, ...(proxy === undefined ? [] : [proxy])];
  const run = await o.provider.exec(h, probeCommand(phantom, targets), { env: { PROBE: ISOLATION_PROBE }, timeoutMs: 60_000 });
  const problems: string[] = [];
  if (run.exitCode !== 0) problems.push(`the probe did not run (exit ${run.exitCode}; the image needs python3): ${run.stderr.trim()}`);
  else for (const v of readProbeOutput(run.stdout, targets)) if (!v.isolated) problems.push(`${v.target}: ${v.result}`);
  const socket = await o.provider.exec(h, 'ls /var/run/docker.sock /run/docker.sock 2>/dev/null; echo "DOCKER_HOST=${DOCKER_HOST:-}"');
  if (socket.stdout !== 'DOCKER_HOST=\n') problems.push(`an engine socket or DOCKER_HOST is visible inside: ${socket.stdout.trim()}`);
  const denied = await o.provider.exec(h, 'curl -s -m 10 -o /dev/null -w "%{http_code}" http://not-allowed.invalid/');
  if (denied.stdout !== '403') problems.push(`the egress proxy did not refuse an unlisted host (HTTP ${denied.stdout || 'none'})`);
  const checked = `${targets.join(', ')}${proxy === undefined ? ' (unix endpoint: socket not mounted, DOCKER_HOST unset)' : ''}, egress proxy refusal`;
  if (problems.length === 0) return { check: 'isolation', status: 'pass', detail: `Unreachable from ${h.id}: ${checked}.` };
  return {
    check: 'isolation',
    status: 'fail',
    detail: problems.join('; '),
    fix: 'Do not attach sandbox networks to other networks or give them a host address; keep the socket proxy off sandbox networks; see SECURITY.md, section 3.',
  };
}

/**
 * Transparent mode as a client with no proxy settings meets it (issue 20): the allowlisted name
 * resolves to the name server Docker was given (the proxy's fixed address), an unlisted one is
 * NXDOMAIN at once instead of a resolver timeout, and port 80 of that address answers with the
 * proxy's own reason header (the doctor's name is reserved, so the proxy cannot resolve it).
 */
const TRANSPARENT_PROBE = [
  'unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy NO_PROXY no_proxy ALL_PROXY all_proxy',
  `echo "allowed=$(getent hosts ${DOCTOR_ALLOWED_HOST} | cut -d' ' -f1)"`,
  's=$(date +%s%N); getent hosts not-allowed.invalid >/dev/null; rc=$?; e=$(date +%s%N)',
  'echo "unlisted=$rc $(( (e - s) / 1000000 ))"',
  `echo "http=$(curl -s -m 10 -o /dev/null -D - http://${DOCTOR_ALLOWED_HOST}/ | tr -d '\\r' | grep -i '^x-egress-reason:' | cut -d' ' -f2)"`,
].join('\n');
/** An unlisted name fails in milliseconds; a resolver that times out takes seconds. */
const NXDOMAIN_MS = 2_000;

async function checkTransparent(o: DoctorOptions, h: SandboxHandle): Promise<DoctorCheck> {
  const dns = (await o.engine.inspectContainer(h.id))?.hostConfig.Dns;
  const server = Array.isArray(dns) && typeof dns[0] === 'string' ? dns[0] : undefined;
  const run = await o.provider.exec(h, TRANSPARENT_PROBE, { timeoutMs: 60_000 });
  const field = (key: string): string => new RegExp(`^${key}=(.*)$`, 'm').exec(run.stdout)?.[1] ?? '';
  const [code, ms] = field('unlisted').split(' ').map(Number);
  const problems: string[] = [];
  if (server === undefined) problems.push('the sandbox has no name server of its own (its network has no fixed address for the proxy)');
  else if (field('allowed') !== server) problems.push(`${DOCTOR_ALLOWED_HOST} resolved to "${field('allowed')}", not to the egress proxy (${server})`);
  if (code !== 2 || !(Number(ms) < NXDOMAIN_MS)) problems.push(`an unlisted name did not fail at once (getent exit ${code}, ${ms} ms)`);
  if (field('http') === '') problems.push('port 80 of the egress proxy did not answer plain HTTP');
  if (problems.length === 0) {
    return { check: 'transparent_egress', status: 'pass', detail: `Name server ${server}: ${DOCTOR_ALLOWED_HOST} resolves to it, an unlisted name failed in ${ms} ms, HTTP by Host answered ${field('http')}.` };
  }
  return {
    check: 'transparent_egress',
    status: 'fail',
    detail: problems.join('; '),
    fix: `Use an egress image with transparent mode (${o.config.egressProxyImage}: EGRESS_TRANSPARENT_LISTEN) and a Docker whose embedded DNS forwards to HostConfig.Dns from an internal network (20.10 does); docs/controller.md, "Transparent egress".`,
  };
}

/** Proxies that do not run on their sandbox's network: those sandboxes have no way out until repaired. */
async function checkSandboxesEgress(o: DoctorOptions): Promise<DoctorCheck> {
  const check = 'sandboxes_egress';
  if (o.listSandboxes === undefined) {
    return { check, status: 'skip', detail: 'Listing sandboxes needs the engine itself (the socket proxy refuses it by design); run capybara-sandbox ls on the engine host.' };
  }
  let rows: readonly SandboxRow[];
  try {
    rows = await o.listSandboxes();
  } catch (err) {
    return { check, status: 'skip', detail: `The engine on this host cannot list sandboxes: ${(err as Error).message}` };
  }
  // A stopped sandbox's proxy may be stopped too (suspend); a running one's must run on its network.
  const running = rows.filter((r) => r.egress !== 'none' && r.state === 'running');
  const broken = running.filter((r) => r.egress !== 'running');
  if (broken.length === 0) return { check, status: 'pass', detail: `${running.length} running sandbox(es) with an egress proxy, each proxy running on its sandbox's network.` };
  return {
    check,
    status: 'fail',
    detail: `No way out: ${broken.map((r) => `${r.name} (egress proxy ${r.egress})`).join(', ')}.`,
    fix: 'The controller repairs a sandbox before its next command or resume (capybara-sandbox exec NAME -- true); or destroy it.',
  };
}

/** What to do when the throwaway sandbox did not start: the cause named where it is known. */
function runtimeFix(config: DeploymentConfig, err: unknown): string {
  const message = (err as Error).message;
  // The socket proxy tells the shared network from sandbox networks by its own setting: a
  // controller with another --network has its shared network judged as a sandbox's.
  if (/socket proxy: network_option_(required|not_allowed):/.test(message)) {
    return `The socket proxy does not take ${config.network} for the shared network: give the socket proxy SOCKET_PROXY_SHARED_NETWORK=${config.network}, or give the controller (and doctor --network) the name the socket proxy has.`;
  }
  if (isSandboxError(err, 'network_not_isolated')) return 'See shared_network_icc_off above: the controller uses only a shared network with inter-container traffic off.';
  if (config.runtime === 'runsc') return 'Register gVisor with the daemon (runtimes.runsc in daemon.json) and check that runsc can start containers on this host, or use runtime "runc".';
  return 'Check the engine logs (journalctl -u docker) and the images.';
}

/**
 * A check as it is shown: its detail and fix as printable ASCII (decision-format.ts escapeText).
 * Details quote what the throwaway sandbox's commands wrote (the probe's stderr, what ls found,
 * curl's answer), which are the image's own programs, and engine error messages: a hostile image
 * (doctor --image) wrote terminal controls and forged whole check lines with a newline.
 */
function shown(c: DoctorCheck): DoctorCheck {
  const plain = (text: string): string => escapeText(text, Number.POSITIVE_INFINITY);
  return { ...c, detail: plain(c.detail), ...(c.fix === undefined ? {} : { fix: plain(c.fix) }) };
}

export async function runDoctor(o: DoctorOptions): Promise<DoctorCheck[]> {
  const done: DoctorCheck[] = [];
  const checks = {
    push(...finished: DoctorCheck[]): void {
      for (const found of finished) {
        const c = shown(found);
        done.push(c);
        o.onCheck?.(c);
      }
    },
  };
  const engine = await checkEngine(o);
  checks.push(engine);
  const later: DoctorCheckId[] = ['socket_proxy_refuses', 'images_present', 'shared_network_icc_off', 'runtime_usable', 'isolation', 'transparent_egress', 'sandboxes_egress'];
  if (engine.status !== 'pass') {
    checks.push(...later.map((check) => ({ check, status: 'skip' as const, detail: 'The engine is not reachable.' })));
    return done;
  }
  checks.push(await checkProxyRefuses(o));
  checks.push(await checkImages(o));
  checks.push(await checkSharedNetwork(o));
  const id = `doctor-${randomBytes(4).toString('hex')}`;
  let handle: SandboxHandle | undefined;
  const started = Date.now();
  try {
    handle = await o.provider.create({ id, image: o.image, limits: { egress: 'allowlist', allowHosts: [DOCTOR_ALLOWED_HOST] } });
    const r = await o.provider.exec(handle, 'true');
    if (r.exitCode !== 0) throw new Error(`"true" exited with ${r.exitCode}: ${r.stderr.trim()}`);
    checks.push({ check: 'runtime_usable', status: 'pass', detail: `Runtime ${o.config.runtime}: sandbox ${handle.id} started and ran a command in ${Date.now() - started} ms.` });
  } catch (err) {
    checks.push({
      check: 'runtime_usable',
      status: 'fail',
      detail: `Runtime ${o.config.runtime}: ${(err as Error).message}`,
      fix: runtimeFix(o.config, err),
    });
  }
  try {
    if (handle === undefined) checks.push({ check: 'isolation', status: 'skip', detail: 'No throwaway sandbox could be started.' });
    else checks.push(await checkIsolation(o, handle));
  } catch (err) {
    checks.push({ check: 'isolation', status: 'fail', detail: (err as Error).message, fix: 'Run doctor again; if it persists, check the engine logs.' });
  }
  try {
    if (handle === undefined) checks.push({ check: 'transparent_egress', status: 'skip', detail: 'No throwaway sandbox could be started.' });
    else checks.push(await checkTransparent(o, handle));
  } catch (err) {
    checks.push({ check: 'transparent_egress', status: 'fail', detail: (err as Error).message, fix: 'Run doctor again; if it persists, check the engine logs.' });
  } finally {
    await o.provider.destroyByName(`cap-${id}`).catch(() => undefined);
  }
  checks.push(await checkSandboxesEgress(o));
  return done;
}
