/**
 * Warm network slots (controller/sandbox/warm-networks.ts) on the in-memory engine, where a drain,
 * a refill and a failure meet. warm-networks.test.ts holds the pool's ordinary life.
 */
import t from 'tap';
import { IMAGES } from '../../../common/index.js';
import { fakeSandbox, type FakeSandbox } from '../../support/fake-sandbox.js';

const spec = (id: string, allowHosts: string[] = ['pypi.org']) => ({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts } });

function warmNetworks(s: FakeSandbox): string[] {
  return s.engine.networkNames().filter((n) => n.startsWith('cap-warm.')).sort();
}

t.test('a make that fails during a drain does not let creates refill the pool after it', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 1 });
  await s.provider.warmUp();
  // From now on every warm network's make fails (the refill a create starts behind it).
  s.engine.beforeCall((call) => {
    if (call.method === 'createNetwork' && call.target.startsWith('cap-warm.')) throw s.engine.status(call, 500, 'the engine failed');
  });
  const a = await s.provider.create(spec('a'));
  // The controller stops while that refill is under way.
  await s.provider.drainWarm();
  const now = Date.now;
  Date.now = () => now() + 60_000;
  t.teardown(() => {
    Date.now = now;
  });
  const before = s.engine.calls.length;
  const b = await s.provider.create(spec('b'));
  await new Promise((resolve) => setTimeout(resolve, 200));
  const tried = s.engine.calls.slice(before).filter((c) => c.method === 'createNetwork' && c.target.startsWith('cap-warm.'));
  t.equal(tried.length, 0, 'no warm network made after the drain, once its failure is 10 s old');
  await s.provider.destroy(a);
  await s.provider.destroy(b);
  t.same(warmNetworks(s), [], 'none left');
});

t.test('the pool refills once no create is under way: never beside another create', async (t) => {
  const s = fakeSandbox({ egressIsolation: 'shared', warmSlots: 2 });
  await s.provider.warmUp();
  // b's start waits until a has finished, and a while after: a's end must not start a refill.
  let aDone: () => void = () => undefined;
  const aFinished = new Promise<void>((resolve) => (aDone = resolve));
  s.engine.beforeCall(async (call) => {
    if (call.method === 'startContainer' && call.target === 'cap-b') {
      await aFinished;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
  const refills = (): number => s.engine.calls.filter((c) => c.method === 'createNetwork' && c.target.startsWith('cap-warm.')).length;
  const made = refills();
  const b = s.provider.create(spec('b'));
  const a = await s.provider.create(spec('a'));
  aDone();
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(refills(), made, 'no warm network made while b is still being created');
  const bHandle = await b;
  await s.provider.warmUp();
  t.equal(refills(), made + 2, 'both made once b is done');
  t.equal(warmNetworks(s).length, 4, 'two taken, two ready');
  await s.provider.destroy(a);
  await s.provider.destroy(bHandle);
});
