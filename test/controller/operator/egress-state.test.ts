/** What ls, inspect and doctor say of a sandbox's egress proxy (egress-state.ts), without Docker. */
import t from 'tap';
import { egressState } from '../../../controller/operator/egress-state.js';

const net = (id: string, name = `net-${id}`) => ({ id, name, ipv4: '' });
const sandbox = (tier: string, networks = [net('n1')]) => ({ state: 'running', labels: { 'dev.capybara.sandbox.egress': tier }, networks });
const shared = net('shared', 'capybara-sandboxes');

t.test('a tier without a proxy: none, whatever runs', async (t) => {
  t.equal(egressState(sandbox('internal'), undefined), 'none');
  t.equal(egressState(sandbox('open', [shared]), { state: 'running', networks: [shared] }), 'none');
});

t.test('a tier with a proxy: missing, its state, or detached', async (t) => {
  t.equal(egressState(sandbox('allowlist'), undefined), 'missing');
  t.equal(egressState(sandbox('allowlist'), { state: 'exited', networks: [net('n1'), shared] }), 'exited');
  t.equal(egressState(sandbox('allowlist'), { state: 'restarting', networks: [net('n1'), shared] }), 'restarting');
  t.equal(egressState(sandbox('allowlist'), { state: 'running', networks: [net('n1'), shared] }), 'running');
  // `docker network disconnect`, or a controller killed between the proxy's start and its connect.
  t.equal(egressState(sandbox('allowlist'), { state: 'running', networks: [shared] }), 'detached');
  // On a network of the same name but another id (a duplicate of the name): still off the sandbox's.
  t.equal(egressState(sandbox('allowlist'), { state: 'running', networks: [net('n2', 'net-n1'), shared] }), 'detached');
});

t.test('a sandbox whose own network is not known (stopped: no network id) is judged by the proxy\'s state', async (t) => {
  t.equal(egressState(sandbox('allowlist', [net('')]), { state: 'running', networks: [shared] }), 'running');
});

t.test('a running sandbox with a leg on another network besides its own: exposed, whatever its proxy does', async (t) => {
  // `docker network connect` of the sandbox to the shared network: its traffic need not pass the proxy.
  t.equal(egressState(sandbox('allowlist', [net('n1'), shared]), { state: 'running', networks: [net('n1'), shared] }), 'exposed');
  t.equal(egressState(sandbox('allowlist', [shared, net('n1')]), { state: 'running', networks: [net('n1'), shared] }), 'exposed', 'listed first or not');
});
