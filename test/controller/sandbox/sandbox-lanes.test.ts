/**
 * SandboxLanes without Docker: changes are plain async functions that record when they start and
 * end, so each case can say whether two of them overlapped.
 */
import t from 'tap';
import { SandboxLanes } from '../../../controller/sandbox/sandbox-lanes.js';

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

function recorder() {
  const events: string[] = [];
  const change = (label: string, ms: number, fail = false) => async () => {
    events.push(`${label} start`);
    await tick(ms);
    events.push(`${label} end`);
    if (fail) throw new Error(`${label} failed`);
    return label;
  };
  return { events, change };
}

t.test('changes to one sandbox run one at a time, in call order', async (t) => {
  const lanes = new SandboxLanes();
  const { events, change } = recorder();
  const results = await Promise.all([
    lanes.run('cap-a', change('resume', 30)),
    lanes.run('cap-a', change('destroy', 5)),
    lanes.run('cap-a', change('create', 1)),
  ]);
  t.same(results, ['resume', 'destroy', 'create']);
  t.same(events, ['resume start', 'resume end', 'destroy start', 'destroy end', 'create start', 'create end']);
  t.equal(lanes.busy, 0, 'nothing is kept once the lane is empty');
});

t.test('changes to different sandboxes do not wait for each other', async (t) => {
  const lanes = new SandboxLanes();
  const { events, change } = recorder();
  await Promise.all([lanes.run('cap-a', change('a', 30)), lanes.run('cap-b', change('b', 1))]);
  t.same(events, ['a start', 'b start', 'b end', 'a end']);
});

t.test('a failed change rejects its own caller only, and the next one still runs', async (t) => {
  const lanes = new SandboxLanes();
  const { events, change } = recorder();
  const failed = lanes.run('cap-a', change('resume', 5, true));
  const next = lanes.run('cap-a', change('destroy', 1));
  await t.rejects(failed, /resume failed/);
  t.equal(await next, 'destroy');
  t.same(events, ['resume start', 'resume end', 'destroy start', 'destroy end']);
  t.equal(lanes.busy, 0);
});

t.test('a change that throws before its first await is still contained in its lane', async (t) => {
  const lanes = new SandboxLanes();
  const thrown = lanes.run('cap-a', () => {
    throw new Error('synchronous');
  });
  await t.rejects(thrown, /synchronous/);
  t.equal(await lanes.run('cap-a', async () => 'after'), 'after');
});
