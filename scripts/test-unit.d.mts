// Types of scripts/test-unit.mjs, for the tests that import it (test/scripts/test-unit.test.ts).

/** The needs a test file may declare for all its tests (`await fileNeeds(t, '<need>')`). */
export const NEEDS: readonly string[];
/** Every test file (`*.test.ts`) under `root`/test, relative to `root`, sorted. */
export function testFiles(root: string): string[];
/** The need a test file's text declares for the whole file, or undefined (throws on a malformed declaration). */
export function declaredNeed(text: string): string | undefined;
/** The test files that declare no need. */
export function unitTestFiles(root: string): string[];
/** Why a test file must run in a process of its own, or undefined. */
export function soloReason(text: string): string | undefined;

export interface RunCounts {
  pass: number;
  fail: number;
  skip: number;
  todo: number;
}

export function runTestFiles(options: {
  root: string;
  files: readonly string[];
  jobs: number;
  env: NodeJS.ProcessEnv;
  timesFile?: string;
  fileTimeoutMs?: number;
  endTimeoutMs?: number;
  write?: (s: string) => void;
}): Promise<{ totals: RunCounts; failed: string[] }>;
