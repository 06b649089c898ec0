import { DockerEngine } from '../../controller/docker/index.js';

/**
 * An engine, as another controller process has it, whose registration writes wait: `atWrite`
 * resolves when one reaches its write, which goes on once `release` is called. The race tests use
 * it to land a write after the sandbox was made again.
 */
export function heldRegistrationWrites(endpoint: string): { readonly engine: DockerEngine; readonly atWrite: Promise<void>; release(): void } {
  const engine = new DockerEngine({ endpoint });
  const put = engine.putRegistration.bind(engine);
  let reached!: () => void;
  const atWrite = new Promise<void>((r) => (reached = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  engine.putRegistration = async (container, archive) => {
    reached();
    await released;
    return put(container, archive);
  };
  return { engine, atWrite, release };
}
