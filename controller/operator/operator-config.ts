/**
 * The operator CLI's deployment config: the plugin's own strict schema, read from a JSON file
 * and/or overridden by flags, validated once. Errors name the file (or the command line).
 */
import { readFileSync } from 'node:fs';
import { parseDeploymentConfig, type DeploymentConfig } from '../config.js';
import { SandboxError } from '../errors.js';
import type { OperatorArgs } from './args.js';

export function loadOperatorConfig(args: OperatorArgs): DeploymentConfig {
  let input: Record<string, unknown> = {};
  if (args.configFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(args.configFile, 'utf8');
    } catch (err) {
      throw new SandboxError('invalid_config', `Cannot read config file ${args.configFile}: ${(err as Error).message}`, { cause: err });
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new SandboxError('invalid_config', `Config file ${args.configFile} is not valid JSON: ${(err as Error).message}`, { cause: err });
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new SandboxError('invalid_config', `Config file ${args.configFile} must hold a JSON object (the value of extensionConfig."sandbox-docker").`);
    }
    input = { ...(parsed as Record<string, unknown>) };
  }
  if (args.endpoint !== undefined) input.endpoint = args.endpoint;
  if (args.tlsCertDir !== undefined) input.tlsCertDir = args.tlsCertDir;
  if (args.network !== undefined) input.network = args.network;
  if (input.endpoint === undefined) {
    throw new SandboxError('invalid_config', 'No endpoint: pass --config FILE or --endpoint tcp://host:port | unix:///path (see capybara-sandbox --help)');
  }
  const source = args.configFile === undefined ? 'command line' : `config file ${args.configFile} (with command-line overrides)`;
  return parseDeploymentConfig(input, source);
}
