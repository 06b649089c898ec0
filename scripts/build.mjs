/**
 * `npm run build`: compiles the TypeScript sources into dist/ (tsc, incremental), bundles the
 * egress command into one file (EGRESS_BUNDLE) with its launcher (EGRESS_COMMAND), writes the
 * bundle's code cache, makes the two CLIs executable, and records a fingerprint of what it
 * compiled (dist/.sources), so that `npm start` (start.mjs) compiles only when a source has
 * changed since.
 *
 * The bundle is what runs wherever the egress proxy runs (its image, `npm start`, the tests, the
 * benchmarks): the compiled modules of proxy/, policy/ and common/ and the packages they import
 * (zod, pino, prom-client) in one CommonJS file, by esbuild. The packages the proxy requires on
 * first use (common/require-cjs.ts: undici, yaml, tldts, dns-packet, @peculiar/x509, ipaddr.js)
 * are not in it: they are still required from node_modules at run time, and a proxy that never
 * needs one never loads it. One module instead of some two hundred (zod alone is a hundred):
 * measured, the proxy answers its health check about 100 ms sooner in its container (about 550
 * against 650 ms; 390 against 510 on the host), on the create path of every sandbox with a proxy
 * of its own, and holds 2 to 3 MiB less anonymous memory idle (31 against 33.5 MiB on the host).
 * pino and prom-client in the bundle: another 30 ms on the host (190 against 160 ms). CommonJS,
 * not an ES module, because Node 20 takes V8's code cache only for a script (the launcher,
 * proxy/launch/bundle-loader.ts): another 40 ms (160 against 120 ms).
 *
 * The fingerprint is a SHA-256 of every file tsconfig.json compiles, and of the files that decide
 * how (tsconfig.json, package.json, package-lock.json): path, length and bytes, taken before tsc
 * starts, so an edit made while it runs makes the next start compile again.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the fingerprint of the last build is kept (dist/ is not tracked). */
const STAMP = 'dist/.sources';
/** The egress command as installed (package.json's `capybara-egress`): the launcher, bundled from dist/proxy/launch/egress-command.js. */
export const EGRESS_COMMAND = 'dist/proxy/capybara-egress.mjs';
/** The egress command itself as one script, bundled from dist/proxy/cli.js, and run by EGRESS_COMMAND. */
export const EGRESS_BUNDLE = 'dist/proxy/capybara-egress.cjs';
/** Writes EGRESS_BUNDLE's code cache (proxy/launch/write-code-cache.ts). */
const CODE_CACHE_WRITER = 'dist/proxy/launch/write-code-cache.js';
/** The policy the code cache is written by checking. */
const CODE_CACHE_POLICY = 'policy/default-policy.yaml';
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

/** Whether dist/ was built from the sources as they are now, bundle included. */
export function isBuilt(root = ROOT) {
  return builtFingerprint(root) === fingerprint(root) && existsSync(join(root, EGRESS_BUNDLE)) && existsSync(join(root, EGRESS_COMMAND));
}

/**
 * Bundles the egress command compiled under `root` (its dist/proxy/cli.js) into `root`'s
 * EGRESS_BUNDLE, with the packages it imports from the node_modules `root` sees (the image build
 * bundles its staged context, after its production install), and its launcher into
 * EGRESS_COMMAND; resolves with 0, or 1 once esbuild has said why. The code cache is written
 * apart (writeCodeCache), by the node that will run the bundle.
 */
export async function bundleEgress(root = ROOT) {
  const esbuild = await import('esbuild');
  const common = { absWorkingDir: root, bundle: true, platform: 'node', target: 'node20', logLevel: 'warning' };
  try {
    await esbuild.build({
      ...common,
      entryPoints: ['dist/proxy/cli.js'],
      outfile: EGRESS_BUNDLE,
      format: 'cjs',
      // The compiled modules find their packages and files from their own URL: in the bundle, the bundle's.
      define: { 'import.meta.url': '__bundleUrl' },
      banner: { js: "const __bundleUrl = require('node:url').pathToFileURL(__filename).href;" },
    });
    await esbuild.build({ ...common, entryPoints: ['dist/proxy/launch/egress-command.js'], outfile: EGRESS_COMMAND, format: 'esm' });
    return 0;
  } catch {
    // esbuild has printed its errors.
    return 1;
  }
}

/**
 * Writes the code cache of `root`'s EGRESS_BUNDLE with this node (proxy/launch/bundle-loader.ts);
 * resolves with 0, or with the writer's failing status once it has said why.
 */
export async function writeCodeCache(root = ROOT) {
  const child = spawn(process.execPath, [join(root, CODE_CACHE_WRITER), join(root, CODE_CACHE_POLICY)], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code === 0 ? 0 : (code ?? (signal ? 128 : 1))));
  });
}

/**
 * Compiles, bundles and writes the code cache; resolves with tsc's exit status (or 1 when the
 * bundle fails, or the cache writer's status). `onChild`
 * gets the compiler's process, for a caller that stops it on a signal.
 */
export async function build(root = ROOT, onChild = () => undefined) {
  const sources = fingerprint(root);
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  const child = spawn(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { cwd: root, stdio: 'inherit' });
  onChild(child);
  const compiled = await new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code === 0 ? 0 : (code ?? (signal ? 128 : 1))));
  });
  if (compiled !== 0) return compiled;
  const bundled = await bundleEgress(root);
  if (bundled !== 0) return bundled;
  const cached = await writeCodeCache(root);
  if (cached !== 0) return cached;
  const { bin } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  for (const file of Object.values(bin)) chmodSync(join(root, file), 0o755);
  // Written whole or not at all: a stamp cut short would only mean one more compile, but a
  // rename keeps even that from happening.
  writeFileSync(join(root, `${STAMP}.tmp`), `${sources}\n`);
  renameSync(join(root, `${STAMP}.tmp`), join(root, STAMP));
  return 0;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  process.exitCode = await build();
}
