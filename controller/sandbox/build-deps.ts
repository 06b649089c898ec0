/** What the steps of a create and a recovery work with: the engine, the config, and who to tell. */
import type { Logger } from 'pino';
import type { DeploymentConfig } from '../spec/index.js';
import type { EgressMode, SandboxEngine } from '../docker/index.js';
import type { CredentialSource } from './credential-source.js';

export interface BuildDeps {
  readonly engine: SandboxEngine;
  readonly config: DeploymentConfig;
  readonly extraLabels: Readonly<Record<string, string>>;
  readonly egressTestHosts: Readonly<Record<string, string>> | undefined;
  readonly logger: Logger;
  /** The mode of the egress proxies this provider creates (and rebuilds): `report` only for run --report. */
  readonly egressMode: EgressMode;
  /** The deployment CA and the secrets' values, for sandboxes with inspected hosts (and their rebuilt proxies). */
  readonly credentials: CredentialSource;
}
