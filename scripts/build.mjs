/**
 * `npm run build`: compiles the TypeScript sources into dist/ (tsc, incremental), makes the two
 * CLIs executable, and records a fingerprint of what it compiled (dist/.sources), so that
 * `npm start` (start.mjs) compiles only when a source has changed since.
 *
 * The fingerprint is a SHA-256 of every file tsconfig.json compiles, and of the files that decide
 * how (tsconfig.json, package.json, package-lock.json): path, length and bytes, taken before tsc
 * starts, so an edit made while it runs makes the next start compile again.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the fingerprint of the last build is kept (dist/ is not tracked). */
const STAMP = 'dist/.sources';
/** What decides the output besides the sources. */
const SETTINGS = ['tsconfig.json', 'package.json', 'package-lock.json'];

/** The files tsconfig.json compiles: its include globs are `<folder>/**\/*.ts` and top-level files. */
function sourceFiles(root) {
  const { include } = JSON.parse(readFileSync(join(root, 'tsconfig.json'), 'utf8'));
  const files = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.m?ts$/.test(entry.name)) files.push(relative(root, path));
    }
  };
  for (const pattern of include) {
    const folder = /^([^*]+)\/\*\*\/\*\.ts$/.exec(pattern);
    if (folder) walk(join(root, folder[1]));
    else if (!pattern.includes('*')) files.push(pattern);
    else throw new Error(`tsconfig.json: include pattern ${pattern} is not one build.mjs can list; extend sourceFiles`);
  }
  return files.sort();
}

/** The fingerprint of the sources and settings under `root` as they are now. */
export function fingerprint(root = ROOT) {
  const hash = createHash('sha256');
  for (const file of [...sourceFiles(root), ...SETTINGS]) {
    let bytes;
    try {
      bytes = readFileSync(join(root, file));
    } catch {
      bytes = Buffer.alloc(0);
    }
    hash.update(`${file}\0${bytes.length}\0`).update(bytes);
  }
  return hash.digest('hex');
}

/** The fingerprint of the last build under `root`, or undefined (never built, or built by hand). */
export function builtFingerprint(root = ROOT) {
  try {
    return readFileSync(join(root, STAMP), 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** Whether dist/ was built from the sources as they are now. */
export function isBuilt(root = ROOT) {
  return builtFingerprint(root) === fingerprint(root);
}

/**
 * Compiles; resolves with tsc's exit status. `onChild` gets the compiler's process, for a caller
 * that stops it on a signal.
 */
export function build(root = ROOT, onChild = () => undefined) {
  const sources = fingerprint(root);
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  const child = spawn(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { cwd: root, stdio: 'inherit' });
  onChild(child);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code !== 0) return resolve(code ?? (signal ? 128 : 1));
      const { bin } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
      for (const file of Object.values(bin)) chmodSync(join(root, file), 0o755);
      // Written whole or not at all: a stamp cut short would only mean one more compile, but a
      // rename keeps even that from happening.
      writeFileSync(join(root, `${STAMP}.tmp`), `${sources}\n`);
      renameSync(join(root, `${STAMP}.tmp`), join(root, STAMP));
      resolve(0);
    });
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  process.exitCode = await build();
}
