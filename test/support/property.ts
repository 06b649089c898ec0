/** Property tests (fast-check) as tap assertions. */
import type { Test } from 'tap';
import fc from 'fast-check';

/** Fixed, so a failure reproduces; change it to explore further. */
export const PROPERTY_SEED = 0x5eed;

/** One tap assertion for a property: fast-check's shrunk counterexample is its failure message. */
export async function holds<T>(t: Test, property: fc.IAsyncProperty<T> | fc.IProperty<T>, numRuns: number): Promise<void> {
  try {
    await fc.assert(property as fc.IAsyncProperty<T>, { numRuns, seed: PROPERTY_SEED });
    t.pass('property holds');
  } catch (err) {
    t.fail((err as Error).message.split('\n').slice(0, 3).join(' '));
  }
}
