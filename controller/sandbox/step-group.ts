/**
 * The steps of one create, run side by side. Concurrency brings two failure shapes a sequence
 * does not have: a step can fail while another is still on the wire, and a step can be about to
 * send its next call after another already failed. Both would leave objects behind a cleanup
 * that ran too early. So after the first failure no step sends another call (`proceed` throws),
 * and `settled` returns only when every step has finished, with the first failure: the cleanup
 * after it sees everything any step made, and the error names what went wrong first, not a step
 * that stopped because of it.
 */

/** Thrown by `proceed` in a step that is stopped because another one failed; never surfaces. */
class StepStopped extends Error {}

export class StepGroup {
  private readonly steps: Promise<unknown>[] = [];
  private failure: { readonly err: unknown } | undefined;

  /** Starts a step now. Its promise may be awaited by later steps (a failure reaches them too). */
  run<T>(step: () => Promise<T>): Promise<T> {
    const running = step().catch((err: unknown) => {
      if (this.failure === undefined && !(err instanceof StepStopped)) this.failure = { err };
      throw err;
    });
    // Rejections are collected by `settled`; a step that nobody else awaits must not count as
    // unhandled before that.
    running.catch(() => undefined);
    this.steps.push(running);
    return running;
  }

  /** Called by a step before each engine call: stops it once another step has failed. */
  readonly proceed = (): void => {
    if (this.failure !== undefined) throw new StepStopped();
  };

  /** Waits for every step (also those started meanwhile); throws the first failure. */
  async settled(): Promise<void> {
    let seen = 0;
    while (seen < this.steps.length) {
      const batch = this.steps.slice(seen);
      seen = this.steps.length;
      await Promise.allSettled(batch);
    }
    // A step only stops after a failure was recorded, so no failure means every step succeeded.
    if (this.failure !== undefined) throw this.failure.err;
  }
}
