/**
 * The product's version: package.json's, found by walking up from this module (it sits one level
 * deeper in dist/ than in the sources, and the images copy package.json beside dist/).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE_NAME = 'capybara-sandbox-docker';

function findVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === PACKAGE_NAME && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // No package.json here, or not ours: one level up.
    }
    if (dirname(dir) === dir) return 'unknown';
  }
}

export const VERSION = findVersion();
