/**
 * The address pool of sandbox networks (controller/spec/address-pool.ts): which blocks may be a
 * pool, the subnets a name tries (each slot once, in an order of its own), and the addresses in a
 * subnet (dynamic ones in the lower half, the egress proxy's at the last usable one).
 */
import t from 'tap';
import { addressPoolProblem, parseAddressPool, sandboxSubnet, subnetAddresses, subnetSlots } from '../../../controller/spec/address-pool.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

t.test('a pool is a private IPv4 block, canonical, at least one subnet large', async (t) => {
  const rows: Array<{ pool: string; prefix: number; ok: boolean }> = [
    { pool: '10.213.0.0/16', prefix: 28, ok: true },
    { pool: '10.0.0.0/8', prefix: 29, ok: true },
    { pool: '172.16.0.0/12', prefix: 24, ok: true },
    { pool: '192.168.64.0/20', prefix: 28, ok: true },
    { pool: '10.213.0.0/28', prefix: 28, ok: true },
    { pool: '10.213.0.0/29', prefix: 28, ok: false },
    { pool: '172.32.0.0/16', prefix: 28, ok: false },
    { pool: '169.254.0.0/16', prefix: 28, ok: false },
    { pool: '100.64.0.0/10', prefix: 28, ok: false },
    { pool: '0.0.0.0/0', prefix: 28, ok: false },
    { pool: '10.213.0.1/16', prefix: 28, ok: false },
    { pool: '010.213.0.0/16', prefix: 28, ok: false },
    { pool: '10.213.0.0/016', prefix: 28, ok: false },
    { pool: '10.213.0.256/16', prefix: 28, ok: false },
    { pool: '10.213.0.0/33', prefix: 28, ok: false },
    { pool: ' 10.213.0.0/16', prefix: 28, ok: false },
    { pool: '10.213.0.0', prefix: 28, ok: false },
  ];
  for (const row of rows) t.equal(addressPoolProblem(row.pool, row.prefix) === undefined, row.ok, `${row.pool} with /${row.prefix}`);
  const err = (() => {
    try {
      return parseAddressPool('8.8.0.0/16', 28);
    } catch (e) {
      return e;
    }
  })();
  t.ok(isSandboxError(err, 'invalid_config'), String(err));
});

t.test('a name tries every subnet of the pool once, from its own start', async (t) => {
  const pool = parseAddressPool('10.213.0.0/22', 28);
  t.equal(pool.size, 64);
  for (const name of ['cap-a-net', 'cap-b-net', 'cap-a-much-longer-conversation-id-net']) {
    const slots = [...subnetSlots(pool, name)];
    t.equal(slots.length, 64, `${name}: 64 tries`);
    t.equal(new Set(slots).size, 64, `${name}: each slot once`);
    t.same([...subnetSlots(pool, name)], slots, `${name}: the same order every time, in every process`);
  }
  const firsts = new Set(Array.from({ length: 200 }, (_, i) => subnetSlots(pool, `cap-${i}-net`).next().value));
  t.ok(firsts.size > 40, `200 names start at ${firsts.size} of 64 slots: spread, so creates rarely collide`);
});

t.test('the addresses of a subnet', async (t) => {
  const pool = parseAddressPool('10.213.0.0/16', 28);
  t.same(sandboxSubnet(pool, 0), { subnet: '10.213.0.0/28', ipRange: '10.213.0.0/29', gateway: '10.213.0.1', egressAddress: '10.213.0.14' });
  t.same(sandboxSubnet(pool, 4095), { subnet: '10.213.255.240/28', ipRange: '10.213.255.240/29', gateway: '10.213.255.241', egressAddress: '10.213.255.254' });
  t.same(sandboxSubnet(parseAddressPool('192.168.0.0/16', 24), 3), { subnet: '192.168.3.0/24', ipRange: '192.168.3.0/25', gateway: '192.168.3.1', egressAddress: '192.168.3.254' });
  t.same(sandboxSubnet(parseAddressPool('10.0.0.0/8', 29), 1), { subnet: '10.0.0.8/29', ipRange: '10.0.0.8/30', gateway: '10.0.0.9', egressAddress: '10.0.0.14' });
  t.same(subnetAddresses('10.213.7.16/28'), { subnet: '10.213.7.16/28', ipRange: '10.213.7.16/29', gateway: '10.213.7.17', egressAddress: '10.213.7.30' }, 'read back from a network');
  t.equal(subnetAddresses('172.17.0.0/16'), undefined, 'a network of the engine\'s default pools has no proxy address');
  t.equal(subnetAddresses('10.213.7.17/28'), undefined);
});

t.test('2,000 sandbox networks fit the default pool of 4,096 (half full), each within 64 tries', async (t) => {
  const pool = parseAddressPool('10.213.0.0/16', 28);
  const taken = new Set<number>();
  let tries = 0;
  let worst = 0;
  t.equal(pool.size, 4096, 'a /16 in /28s: 4,096 sandbox networks');
  for (let i = 0; i < 2000; i += 1) {
    let n = 0;
    for (const slot of subnetSlots(pool, `cap-conversation-${i}-net`)) {
      n += 1;
      if (!taken.has(slot)) {
        taken.add(slot);
        break;
      }
    }
    tries += n;
    worst = Math.max(worst, n);
  }
  t.equal(taken.size, 2000);
  t.ok(worst < 64, `at most ${worst} tries for one network (the controller gives up after 64)`);
  t.comment(`${(tries / 2000).toFixed(2)} tries per network on average, at most ${worst}`);
});
