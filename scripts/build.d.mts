// Types of scripts/build.mjs, for the tests that import it (test/scripts/start.test.ts).
import type { ChildProcess } from 'node:child_process';

/** The repository's root. */
export const ROOT: string;
/** The egress command as installed (its launcher), relative to the root. */
export const EGRESS_COMMAND: string;
/** The egress command bundled into one script, relative to the root. */
export const EGRESS_BUNDLE: string;
/** The fingerprint of the sources and build settings under `root` as they are now. */
export function fingerprint(root?: string): string;
/** The fingerprint of the last build under `root`, or undefined. */
export function builtFingerprint(root?: string): string | undefined;
/** Whether dist/ was built from the sources as they are now, bundle included. */
export function isBuilt(root?: string): boolean;
/** Bundles dist/proxy/cli.js under `root` into its EGRESS_BUNDLE, and its launcher into EGRESS_COMMAND; resolves with 0, or 1 when esbuild failed. */
export function bundleEgress(root?: string): Promise<number>;
/** Writes the code cache of `root`'s EGRESS_BUNDLE with this node; resolves with 0, or the writer's failing status. */
export function writeCodeCache(root?: string): Promise<number>;
/** Compiles, bundles and writes the code cache; resolves with tsc's exit status, or 1 when the bundle failed, or the writer's status. */
export function build(root?: string, onChild?: (child: ChildProcess) => void): Promise<number>;
