/**
 * Every sandbox@1 method answers with a promise, a bad argument included: the caller is an agent's
 * host application, which catches the promise. A throw out of the call itself escaped such a
 * `.catch()`, and from a timer's callback ended the host's process (review finding).
 */
import t from 'tap';
import { isSandboxError } from '../../controller/index.js';
import { fakeSandbox } from '../support/fake-sandbox.js';

const BAD = { id: 'not-a-sandbox-name' };

t.test('a bad handle, name or key is a rejected promise, never a throw', async (t) => {
  const { provider } = fakeSandbox();
  const calls: ReadonlyArray<readonly [string, () => Promise<unknown>]> = [
    ['suspend', () => provider.suspend(BAD)],
    ['resume', () => provider.resume(BAD)],
    ['destroy', () => provider.destroy(BAD)],
    ['destroyByName', () => provider.destroyByName('nope')],
    ['exec', () => provider.exec(BAD, 'true')],
    ['exec, no handle at all', () => provider.exec(null as never, 'true')],
    ['readFile', () => provider.readFile(BAD, '/etc/hostname')],
    ['writeFile', () => provider.writeFile(BAD, '/tmp/x', 'x')],
    ['stat', () => provider.stat(BAD, '/')],
    ['killAll', () => provider.killAll(BAD)],
    ['killTagged', () => provider.killTagged(BAD, ['a'])],
    ['destroyWorkspace', () => provider.destroyWorkspace('../x')],
    ['egressUsage', () => provider.egressUsage(BAD)],
    ['changeAllowHosts', () => provider.changeAllowHosts(BAD, { allow: ['a.example'] })],
  ];
  for (const [name, call] of calls) {
    let answer: Promise<unknown> | undefined;
    try {
      answer = call();
    } catch (err) {
      t.fail(`${name}: threw ${String(err)}`);
      continue;
    }
    const err = await answer.then(() => undefined, (e: unknown) => e);
    t.ok(isSandboxError(err, 'invalid_spec'), `${name}: rejects invalid_spec (${String(err).slice(0, 80)})`);
  }
});
