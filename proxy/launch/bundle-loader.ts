/**
 * Runs the bundled egress command (scripts/build.mjs: one CommonJS file) from V8's code cache.
 *
 * Node 20 compiles a module from its source on every start: for the bundle, about 35 ms of
 * parsing before the first line runs, then each function again as it is first called. The code
 * cache is what V8 compiled in one earlier run (writeCodeCache, at build time and in the egress
 * image's build, by the same node binary that runs it): with it, the proxy answers its health
 * check about 40 ms sooner, on the create path of every sandbox with a proxy of its own.
 *
 * The cache is only ever a shortcut. It is used only for the exact bundle it was made from (its
 * first 32 bytes are the SHA-256 of the bundle's source: V8 itself checks only the length) and
 * only when V8 accepts it (same V8 version and flags); anything else, a missing or unreadable
 * file included, compiles from source as Node would.
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { Script } from 'node:vm';

const DIGEST_BYTES = 32;

/** Where the code cache of `bundle` is kept. */
export const codeCacheOf = (bundle: string): string => `${bundle}.cache`;

/** What V8 compiled the last time, when it was made from exactly `source` (its digest `key`). */
function cachedFor(file: string, key: Buffer): Buffer | undefined {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch {
    return undefined;
  }
  return bytes.length > DIGEST_BYTES && bytes.subarray(0, DIGEST_BYTES).equals(key) ? bytes.subarray(DIGEST_BYTES) : undefined;
}

interface Loaded {
  readonly script: Script;
  readonly key: Buffer;
  /** Whether V8 took the cache (false: there was none, or it was not this bundle's, or V8 refused it). */
  readonly fromCache: boolean;
}

/** Compiles `bundle` (with its code cache when `useCache`) and runs it as Node runs a CommonJS main module. */
function load(bundle: string, useCache: boolean): Loaded {
  const bytes = readFileSync(bundle);
  const key = createHash('sha256').update(bytes).digest();
  let source = bytes.toString('utf8');
  // The entry's `#!` line, kept by esbuild: allowed only at the very start of a script, which the
  // CommonJS wrapper is not. Two characters for two keep every line and column where it was.
  if (source.startsWith('#!')) source = `//${source.slice(2)}`;
  const cachedData = useCache ? cachedFor(codeCacheOf(bundle), key) : undefined;
  const script = new Script(Module.wrap(source), { filename: bundle, ...(cachedData === undefined ? {} : { cachedData }) });
  const fromCache = cachedData !== undefined && script.cachedDataRejected !== true;
  const module = { exports: {} };
  (script.runInThisContext() as (...args: unknown[]) => void).call(module.exports, module.exports, createRequire(bundle), module, bundle, dirname(bundle));
  return { script, key, fromCache };
}

/**
 * Runs the egress command from `bundle`, from its code cache where that is valid; returns whether
 * it was.
 */
export function runBundle(bundle: string): boolean {
  return load(bundle, true).fromCache;
}

/**
 * Runs the egress command from `bundle` with `args` (meant: `check` of a policy file, which
 * compiles what every start runs: the configuration, the policy, the plans), and as the process
 * exits writes what V8 compiled meanwhile as the bundle's code cache (whole or not at all).
 */
export function writeCodeCache(bundle: string, args: readonly string[]): void {
  process.argv = [process.argv[0] ?? process.execPath, bundle, ...args];
  const { script, key } = load(bundle, false);
  process.once('exit', () => {
    const file = codeCacheOf(bundle);
    writeFileSync(`${file}.tmp`, Buffer.concat([key, script.createCachedData()]));
    renameSync(`${file}.tmp`, file);
  });
}
