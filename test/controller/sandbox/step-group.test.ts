/**
 * StepGroup without Docker: steps are plain async functions that record what they did, so each
 * case can say which calls were made, in which order, and which error came out.
 */
import t from 'tap';
import { StepGroup } from '../../../controller/sandbox/step-group.js';

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

class Failure extends Error {
  constructor(readonly code: string) {
    super(code);
  }
}

async function failureOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (err) {
    return err instanceof Failure ? err.code : `not a step failure: ${String(err)}`;
  }
}

t.test('all steps succeed: settled resolves after the slowest one', async (t) => {
  const done: string[] = [];
  const steps = new StepGroup();
  const a = steps.run(async () => { await tick(20); done.push('a'); return 'a'; });
  steps.run(async () => { await a; steps.proceed(); done.push('after a'); });
  steps.run(async () => { done.push('b'); });
  await steps.settled();
  t.same(done, ['b', 'a', 'after a']);
});

t.test('a step still on the wire when another fails is waited for before settled throws', async (t) => {
  const done: string[] = [];
  const steps = new StepGroup();
  steps.run(async () => { await tick(5); throw new Failure('volume_refused'); });
  steps.run(async () => { await tick(40); done.push('network created'); });
  t.equal(await failureOf(steps.settled()), 'volume_refused');
  t.same(done, ['network created'], 'the cleanup after settled would find the network');
});

t.test('after a failure no step sends its next call', async (t) => {
  const calls: string[] = [];
  const steps = new StepGroup();
  steps.run(async () => { await tick(5); throw new Failure('shared_network_refused'); });
  steps.run(async () => {
    calls.push('create');
    await tick(20);
    steps.proceed();
    calls.push('start');
  });
  t.equal(await failureOf(steps.settled()), 'shared_network_refused', 'the cause, not the stopped step');
  t.same(calls, ['create']);
});

t.test('the first failure is the one reported, also when a later one is of another kind', async (t) => {
  const steps = new StepGroup();
  steps.run(async () => { await tick(30); throw new Failure('later_failure'); });
  steps.run(async () => { await tick(5); throw new Failure('first_failure'); });
  t.equal(await failureOf(steps.settled()), 'first_failure');
});

t.test('a step waiting on a failed one fails with its error, reported once', async (t) => {
  const steps = new StepGroup();
  const network = steps.run(async () => { await tick(5); throw new Failure('network_refused'); });
  let reached = false;
  steps.run(async () => {
    await network;
    reached = true;
  });
  t.equal(await failureOf(steps.settled()), 'network_refused');
  t.notOk(reached);
});

t.test('a step started by a running step is waited for too', async (t) => {
  const done: string[] = [];
  const steps = new StepGroup();
  steps.run(async () => {
    await tick(5);
    steps.run(async () => { await tick(30); done.push('late step'); });
    throw new Failure('early_failure');
  });
  t.equal(await failureOf(steps.settled()), 'early_failure');
  t.same(done, ['late step']);
});
