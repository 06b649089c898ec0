/**
 * An allowlist sandbox's egress proxy reads its policy from a registration (policy/tenants.ts) in
 * a volume of its own, which the controller writes through the Docker API (the socket proxy admits
 * exactly common/tenant-archive.ts's archives): once before the proxy starts, and again for each
 * live change (`changeAllowHosts`). The proxy takes a change within a second, closes the
 * connections the new list refuses, and a restart keeps the list. A proxy with secrets or
 * inspected hosts, or on a network made before the address pool (no subnet to register), keeps
 * the policy of its environment, fixed at create.
 */
import { registrationArchive, TENANTS_DIR, type SlotFileValue } from '../../common/index.js';
import { parseSlotFile, type TenantRegistration } from '../../policy/index.js';
import { SandboxError, type SandboxNames } from '../spec/index.js';
import type { SandboxEngine } from '../docker/index.js';
import type { SandboxNetwork } from './sandbox-network.js';

/** The egress image's own non-root user, which reads the registration. */
export const EGRESS_USER = 'egress';
/** The one registration of a sandbox's own proxy: `sandbox.json`. */
export const EGRESS_SLOT = 'sandbox';
/** What a read of the registration may print: the socket proxy's body cap, and some. */
const READ_MAX_BYTES = 64 * 1024;

/** The network to register, when it can be: a subnet of its own and the proxy's address on it. */
export function registrable(network: SandboxNetwork): { subnet: string; address: string } | undefined {
  return network.subnet === undefined || network.egressAddress === undefined ? undefined : { subnet: network.subnet, address: network.egressAddress };
}

/** Puts the registration into the proxy's volume; one too large for the socket proxy is `invalid_spec`, and nothing is sent. */
export async function writeRegistration(engine: SandboxEngine, names: SandboxNames, value: SlotFileValue): Promise<void> {
  let archive: Buffer;
  try {
    archive = registrationArchive(EGRESS_SLOT, value);
  } catch (err) {
    throw new SandboxError('invalid_spec', `The allowlist of ${names.name} was refused: ${(err as Error).message}.`, { cause: err });
  }
  await engine.putRegistration(names.egress, archive);
}

/**
 * The registration the running egress proxy of `names` reads, by a `cat` in its container as its
 * own user; undefined when there is none (a proxy whose policy is its environment). A file the
 * controller did not write whole is an error that says so.
 */
export async function readRegistration(engine: SandboxEngine, names: SandboxNames, user: string): Promise<TenantRegistration | undefined> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let held = 0;
  const run = await engine.startExec(names.egress, {
    cmd: ['cat', `${TENANTS_DIR}/${EGRESS_SLOT}.json`],
    user,
    onOutput: (stream, chunk) => {
      if (stream === 'stderr' && err.length < 16) err.push(chunk);
      if (stream !== 'stdout' || held > READ_MAX_BYTES) return;
      held += chunk.length;
      out.push(chunk);
    },
  });
  const code = await run.finished;
  const path = `${names.egress}:${TENANTS_DIR}/${EGRESS_SLOT}.json`;
  // Only a file that is positively not there is "none": any other failure is an error, never a
  // reason to fall back to an older list.
  if (code === 1 && /No such file or directory/.test(Buffer.concat(err).toString('utf8'))) return undefined;
  if (code !== 0) throw new SandboxError('engine_error', `The registration ${path} could not be read (exit ${String(code)}); retry.`);
  if (held > READ_MAX_BYTES) throw new SandboxError('engine_error', `The registration ${path} is over ${READ_MAX_BYTES} bytes; destroy and create the sandbox again.`);
  let file;
  try {
    file = parseSlotFile(Buffer.concat(out).toString('utf8'), path);
  } catch (err) {
    throw new SandboxError('engine_error', `The registration ${path} cannot be read (${(err as Error).message}); destroy and create the sandbox again.`, { cause: err });
  }
  return file.vacant ? undefined : file;
}
