/** The self-loop check, pure: which destinations are the proxy's own listeners. */
import t from 'tap';
import { canonicalAddress, isOwnListener } from '../../proxy/upstream/own-address.js';
import { checkAddresses } from '../../policy/index.js';

/** The machine's interface addresses, as the proxy keeps them (canonical). */
const LOCAL = new Set(['127.0.0.1', '93.184.215.14', '::1', '2606:4700:4700::1111', 'fe80::1%eth0'].map((a) => canonicalAddress(a)!));

t.test('a listener on every address is every machine address on its port, in any spelling', async (t) => {
  const all = [{ address: '0.0.0.0', port: 3128 }];
  t.ok(isOwnListener('93.184.215.14', 3128, all, LOCAL));
  t.ok(isOwnListener('::ffff:93.184.215.14', 3128, all, LOCAL), 'IPv4-mapped');
  t.ok(isOwnListener('2606:4700:4700:0:0:0:0:1111', 3128, all, LOCAL), 'IPv6 uncompressed');
  t.notOk(isOwnListener('93.184.215.14', 443, all, LOCAL), 'another port');
  t.notOk(isOwnListener('93.184.215.15', 3128, all, LOCAL), 'an address the machine does not have');
  t.ok(isOwnListener('2606:4700:4700::1111', 80, [{ address: '::', port: 80 }], LOCAL), ':: is every address too');
});

t.test('a listener on one address is that address only', async (t) => {
  const one = [{ address: '93.184.215.14', port: 443 }];
  t.ok(isOwnListener('93.184.215.14', 443, one, LOCAL));
  t.ok(isOwnListener('93.184.215.14', 443, one, new Set()), 'even when the interface list does not have it yet');
  t.notOk(isOwnListener('2606:4700:4700::1111', 443, one, LOCAL), 'another of the machine\'s addresses');
  t.notOk(isOwnListener('not an address', 443, one, LOCAL));
  t.notOk(isOwnListener('93.184.215.14', 443, [], LOCAL), 'no listener');
});

t.test('the decision refuses an own listener as address_not_allowed, after the address class', async (t) => {
  const target = { allowed: true as const, host: 'self.test', port: 3128, rule: 'self.test', tunnel: 'tls' as const };
  const own = (address: string, port: number): boolean => isOwnListener(address, port, [{ address: '0.0.0.0', port: 3128 }], LOCAL);
  t.match(checkAddresses(target, ['93.184.215.15', '93.184.215.14'], own), {
    allowed: false, reason: 'address_not_allowed', detail: /93\.184\.215\.14, the proxy's own address: port 3128 there is one of its listeners/,
  }, 'one answer among several is enough');
  t.match(checkAddresses(target, ['93.184.215.15'], own), { allowed: true, addresses: ['93.184.215.15'] });
  t.match(checkAddresses(target, ['93.184.215.14']), { allowed: true }, 'without the check (a caller that has no listeners)');
});
