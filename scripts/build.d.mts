// Types of scripts/build.mjs, for the tests that import it (test/scripts/start.test.ts).
import type { ChildProcess } from 'node:child_process';

/** The repository's root. */
export const ROOT: string;
/** The fingerprint of the sources and build settings under `root` as they are now. */
export function fingerprint(root?: string): string;
/** The fingerprint of the last build under `root`, or undefined. */
export function builtFingerprint(root?: string): string | undefined;
/** Whether dist/ was built from the sources as they are now. */
export function isBuilt(root?: string): boolean;
/** Compiles; resolves with tsc's exit status. */
export function build(root?: string, onChild?: (child: ChildProcess) => void): Promise<number>;
