/**
 * The I/O behind a sandbox's credentials (spec/credential-plan.ts): the deployment CA (loaded or
 * made once per provider), the secrets' real values (read at each create from the controller's
 * own environment or a file, so a rotated value reaches the next sandbox), and crypto-random
 * placeholders. A value that is missing, empty or not printable ASCII refuses the create, naming
 * the secret and where it was looked for, never the value.
 */
import { randomInt } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { encodeInline, type Authority } from '../../common/index.js';
import {
  applicableSecrets,
  inspectedEntries,
  placeholderFor,
  sandboxCredentials,
  SandboxError,
  type DeploymentConfig,
  type SandboxCredentials,
  type SecretConfig,
  type SecretMaterial,
} from '../spec/index.js';
import { loadDeploymentCa } from './deployment-ca.js';

/** A value longer than this is no token (and would crowd the create body's 32 KiB). */
const MAX_VALUE_BYTES = 8 * 1024;
const PRINTABLE = /^[\x21-\x7e]+$/;

export interface CredentialSourceOptions {
  /** The controller's environment, where values are read (default process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** A uniform integer below n (default crypto.randomInt). */
  readonly randomIndex?: (n: number) => number;
}

export class CredentialSource {
  private authority: Promise<Authority> | undefined;
  private readonly env: NodeJS.ProcessEnv;
  private readonly randomIndex: (n: number) => number;

  constructor(private readonly config: DeploymentConfig, options: CredentialSourceOptions = {}) {
    this.env = options.env ?? process.env;
    this.randomIndex = options.randomIndex ?? ((n) => randomInt(n));
  }

  /**
   * The credentials of a sandbox with this allowlist, or undefined when it has nothing to inspect.
   * `placeholders`: those the sandbox holds already (a rebuilt egress proxy keeps them).
   */
  async forSandbox(allowHosts: readonly string[], placeholders: Readonly<Record<string, string>> = {}): Promise<SandboxCredentials | undefined> {
    if (inspectedEntries(this.config, allowHosts).length === 0) return undefined;
    const secrets = applicableSecrets(this.config, allowHosts).map((s) => this.material(s, placeholders[s.name]));
    const authority = await this.ca();
    return sandboxCredentials({ allowHosts, caCertificatePem: authority.certificatePem, caInline: encodeInline(authority), secrets }, this.config);
  }

  private ca(): Promise<Authority> {
    const stateDir = this.config.stateDir;
    if (stateDir === undefined) throw new SandboxError('invalid_config', 'stateDir is required with inspectHosts or secrets: the deployment CA is kept there');
    // A failed load is tried again at the next create (the operator may fix the directory meanwhile).
    this.authority ??= loadDeploymentCa(stateDir).catch((err: unknown) => {
      this.authority = undefined;
      throw err;
    });
    return this.authority;
  }

  private material(s: SecretConfig, held: string | undefined): SecretMaterial {
    const where = this.whereOf(s);
    const value = this.valueOf(s, where);
    let placeholder = held;
    if (placeholder === undefined || placeholder.length !== value.length || placeholder === value) {
      try {
        placeholder = placeholderFor(value, this.randomIndex);
      } catch (err) {
        throw new SandboxError('invalid_config', `${where}: the value ${(err as Error).message}`, { cause: err });
      }
    }
    return { config: s, value, placeholder };
  }

  private whereOf(s: SecretConfig): string {
    const index = (this.config.secrets ?? []).indexOf(s);
    return `secrets[${index}] (${s.name}, from ${s.file === undefined ? `the controller's variable ${s.name}` : `the file ${s.file}`})`;
  }

  private valueOf(s: SecretConfig, where: string): string {
    let value: string | undefined;
    if (s.file === undefined) {
      value = this.env[s.name];
      if (value === undefined) throw new SandboxError('invalid_config', `${where}: the variable is not set in the controller's environment`);
    } else {
      try {
        // Followed: a Kubernetes Secret mount's files are links into its ..data directory.
        const st = statSync(s.file);
        if (!st.isFile() || st.size > MAX_VALUE_BYTES + 2) throw new Error(st.isFile() ? `larger than ${MAX_VALUE_BYTES} bytes` : 'not a regular file');
        value = readFileSync(s.file, 'utf8').replace(/\r?\n$/, '');
      } catch (err) {
        throw new SandboxError('invalid_config', `${where}: cannot read it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
      }
    }
    if (value === '') throw new SandboxError('invalid_config', `${where}: the value is empty`);
    if (Buffer.byteLength(value) > MAX_VALUE_BYTES) throw new SandboxError('invalid_config', `${where}: the value is longer than ${MAX_VALUE_BYTES} bytes`);
    if (!PRINTABLE.test(value)) throw new SandboxError('invalid_config', `${where}: the value holds a blank, a control character or a non-ASCII byte (a token is printable ASCII)`);
    return value;
  }
}
