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

/** `body` cut at `cuts` (positions, taken modulo its length + 1): the reads a stream could deliver it in. */
export function splits(body: Buffer, cuts: readonly number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (body.length + 1)))].sort((a, b) => a - b);
  const parts: Buffer[] = [];
  let from = 0;
  for (const c of [...at, body.length]) {
    if (c > from) parts.push(body.subarray(from, c));
    from = Math.max(from, c);
  }
  return parts;
}
