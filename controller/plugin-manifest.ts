/**
 * Builds `.capybara-plugin/plugin.json` from the zod deployment schema, so the manifest the
 * host validates config against can never drift from what the controller parses.
 * `node dist/controller/plugin-manifest.js --write` regenerates the committed file;
 * `--check` exits non-zero when it is stale.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { deploymentConfigSchema } from './spec/index.js';

const PLUGIN_NAME = 'sandbox-docker';

/** The JSON Schema of the deployment config (input side: defaulted keys are optional). */
function deploymentJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(deploymentConfigSchema, { io: 'input', target: 'draft-7' }) as Record<string, unknown>;
  // Hosts validate with their own draft; the manifest does not pin one.
  delete schema.$schema;
  return schema;
}

function buildPluginManifest(version: string): Record<string, unknown> {
  const keys = Object.keys(deploymentConfigSchema.shape).sort();
  return {
    schemaVersion: 1,
    name: PLUGIN_NAME,
    version,
    publisher: 'Capybara',
    description:
      'sandbox@1 provider: one hardened Docker container per conversation (runc or gVisor runsc), reached through a Docker socket proxy, with a per-sandbox egress allowlist proxy',
    displayName: { en: 'Docker sandbox', zh: 'Docker 沙箱' },
    extension: {
      entry: './dist/index.mjs',
      manifest: {
        name: PLUGIN_NAME,
        version,
        sdk: '^0.1.0-rc.0',
        provides: ['sandbox@1'],
        requires: [],
        optional: [],
        permissions: {},
        config: {
          deployment: keys.map((path) => ({ path, secret: false, hot: false })),
          org: [],
        },
      },
      configSchemas: { deployment: deploymentJsonSchema() },
    },
  };
}

export function renderPluginManifest(version: string): string {
  return `${JSON.stringify(buildPluginManifest(version), null, 2)}\n`;
}

/** Repository root, from either `controller/` (sources) or `dist/controller/` (compiled). */
function repoRoot(fromUrl: string = import.meta.url): string {
  const here = dirname(fileURLToPath(fromUrl));
  return here.endsWith(join('dist', 'controller')) ? join(here, '..', '..') : join(here, '..');
}

export function packageVersion(root: string): string {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: unknown };
  if (typeof pkg.version !== 'string') throw new Error('package.json has no version');
  return pkg.version;
}

export const PLUGIN_JSON_PATH = join('.capybara-plugin', 'plugin.json');

function main(argv: readonly string[]): number {
  const root = repoRoot();
  const file = join(root, PLUGIN_JSON_PATH);
  const rendered = renderPluginManifest(packageVersion(root));
  if (argv.includes('--write')) {
    writeFileSync(file, rendered);
    process.stdout.write(`wrote ${file}\n`);
    return 0;
  }
  if (argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(file, 'utf8');
    } catch {
      current = '';
    }
    if (current !== rendered) {
      process.stderr.write(`${file} is stale: run node dist/controller/plugin-manifest.js --write\n`);
      return 1;
    }
    return 0;
  }
  process.stdout.write(rendered);
  return 0;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = main(process.argv.slice(2));
}
