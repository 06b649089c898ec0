/**
 * What `destroy` says it removed (run.ts destroyedLine): a sandbox on a shard of the shared egress
 * (the default) leaves the shard, which stays; only a proxy of its own goes with the sandbox; with
 * --force, a name that was not there removed nothing.
 */
import t from 'tap';
import { destroyedLine } from '../../../controller/operator/run.js';

t.test('destroy names what it removed', async (t) => {
  const shard = destroyedLine('cap-demo', true, 'cap-egress.0.capybara-sandbox');
  t.notMatch(shard, /egress proxy/, `a shard sandbox had no egress proxy of its own to remove: ${shard}`);
  t.match(shard, /cap-egress\.0\.capybara-sandbox, which stays/);
  t.equal(destroyedLine('cap-demo', true, undefined), 'destroyed cap-demo (container, egress proxy, network, ephemeral volumes)\n');
  t.equal(destroyedLine('cap-gone', false, undefined), 'no sandbox cap-gone: nothing to destroy\n', '--force on a name that was not there');
});
