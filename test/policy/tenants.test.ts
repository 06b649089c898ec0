/** A shared proxy's registrations (policy/tenants.ts): parsed strictly, and found by both addresses. */
import t from 'tap';
import { parseSlotEnvelope, parseSlotFile, parseSubnet, PolicyError, TenantTable, type Subnet } from '../../policy/index.js';

const subnet = (text: string): Subnet => {
  const parsed = parseSubnet(text);
  if (!parsed.ok) throw new Error(parsed.problem);
  return parsed.subnet;
};
const file = (over: Record<string, unknown> = {}): string =>
  JSON.stringify({ version: 1, sandbox: 'cap-a', lifecycle: '0f3c9a7e-1', subnet: '10.200.0.0/28', address: '10.200.0.14', policy: { allowHosts: ['example.com'] }, ...over });

t.test('subnets: IPv4, host bits zero, the size of a sandbox network', async (t) => {
  t.same(parseSubnet('10.200.0.16/28'), { ok: true, subnet: { text: '10.200.0.16/28', prefix: 28, base: 0x0ac80010 } });
  for (const [text, words] of [
    ['10.200.0.17/28', /host bits set: write 10\.200\.0\.16\/28/],
    ['10.0.0.0/8', /not a sandbox network's size/],
    ['10.200.0.0/31', /not a sandbox network's size/],
    ['fd00::/64', /not an IPv4 subnet/],
    ['10.200.0.0', /not a subnet/],
    ['010.200.0.0/28', /not a subnet|host bits/],
  ] as const) {
    const got = parseSubnet(text);
    t.ok(!got.ok && words.test(got.problem), `${text}: ${got.ok ? 'accepted' : got.problem}`);
  }
});

t.test('a slot file: a registration, or vacant; anything else refused with where and why', async (t) => {
  const reg = parseSlotFile(file(), 'slot-1.json');
  t.match(reg, { vacant: false, sandbox: 'cap-a', lifecycle: '0f3c9a7e-1', subnet: { text: '10.200.0.0/28' }, address: '10.200.0.14', policy: { allowHosts: ['example.com'], connectPorts: [443, 80] } });
  t.same(parseSlotFile('{"version": 1, "vacant": true}', 's'), { vacant: true });
  const refused = (text: string, words: RegExp, what: string): void => {
    const err = (() => {
      try {
        parseSlotFile(text, 'slot-1.json');
        return undefined;
      } catch (e) {
        return e;
      }
    })();
    t.ok(err instanceof PolicyError && words.test(err.message) && err.message.includes('slot-1.json'), `${what}: ${String(err)}`);
  };
  refused('{"version": 1, "sandbox": "a", "sandbox": "b"}', /duplicate|unique/i, 'a duplicate key (JSON.parse would keep the last)');
  refused(file({ lifecycle: 'short' }), /lifecycle/, 'a lifecycle id too short to fence reuse');
  refused(file({ sandbox: '../x' }), /sandbox/, 'a sandbox name outside the alphabet');
  t.match(parseSlotFile(file({ sandbox: 'cap-Build_7' }), 's'), { sandbox: 'cap-Build_7' }, 'a sandbox id of either case, as the controller allows');
  refused(file({ subnet: '10.200.0.1/28' }), /host bits/, 'a subnet with host bits');
  refused(file({ address: '10.200.0.15' }), /not a host address of 10\.200\.0\.0\/28/, 'the broadcast address');
  refused(file({ address: '10.200.0.0' }), /not a host address/, 'the network address');
  refused(file({ address: '10.200.1.2' }), /not a host address/, 'an address off the subnet');
  refused(file({ address: '10.200.0.014' }), /dotted decimal/, 'a leading zero');
  refused(file({ address: '::ffff:10.200.0.14' }), /dotted decimal/, 'an IPv6 spelling');
  refused(file({ policy: { allowHosts: [7] } }), /allowHosts/, 'a policy the policy schema refuses');
  refused(file({ extra: true }), /extra|Unrecognized/i, 'an unknown key');
  refused(file({ version: 2 }), /version/, 'another version');
  refused('{"version": 1, "vacant": false}', /./, 'vacant false');
  refused('not json {', /./, 'not JSON or YAML');
});

t.test('a slot file whose policy is refused still says whose registration it is', async (t) => {
  t.throws(() => parseSlotFile(file({ sandbox: 'cap-z', policy: { allowHosts: [7] } }), 'slot-1.json'), PolicyError);
  t.match(parseSlotEnvelope(file({ sandbox: 'cap-z', policy: { allowHosts: [7] } }), 'slot-1.json'), { vacant: false, sandbox: 'cap-z', lifecycle: '0f3c9a7e-1', subnet: { text: '10.200.0.0/28' } }, 'the envelope parses');
  t.same(parseSlotEnvelope('{"version": 1, "vacant": true}', 's'), { vacant: true });
  t.throws(() => parseSlotEnvelope(file({ sandbox: 'cap-z', lifecycle: 'short' }), 'slot-1.json'), { message: /lifecycle/ }, 'an envelope with a problem of its own names nobody');
  t.throws(() => parseSlotEnvelope('{"version": 1, "sandbox": "cap-z", "lifec', 'slot-1.json'), PolicyError, 'nor does a file cut short');
});

t.test('a connection belongs to the one registered subnet that holds both its addresses', async (t) => {
  const a = { name: 'a', subnet: subnet('10.200.0.0/28') };
  const b = { name: 'b', subnet: subnet('10.200.0.16/28') };
  const wide = { name: 'wide', subnet: subnet('10.201.0.0/24') };
  const table = new TenantTable([a, b, wide]);
  const who = (local: string, remote: string): string => {
    const found = table.identify(local, remote);
    return found.ok ? found.tenant.name : `refused: ${found.detail}`;
  };
  t.equal(who('10.200.0.2', '10.200.0.5'), 'a');
  t.equal(who('10.200.0.18', '10.200.0.29'), 'b');
  t.equal(who('10.201.0.2', '10.201.0.200'), 'wide');
  t.equal(who('::ffff:10.200.0.2', '::ffff:10.200.0.5'), 'a', 'IPv4-mapped spellings');
  t.match(who('10.200.0.18', '10.200.0.5'), /^refused: no registered sandbox network holds both/, 'a client of a on b\'s address: neither');
  t.match(who('10.200.0.2', '10.9.9.9'), /^refused/, 'an address no network holds');
  t.match(who('127.0.0.1', '127.0.0.1'), /^refused/, 'loopback');
  t.match(who('fd00::1', 'fd00::2'), /^refused: .* not an IPv4 connection/, 'IPv6');
  t.match(who('garbage', '10.200.0.5'), /^refused/);
  t.same(table.overlaps(), []);
});

t.test('overlapping subnets serve nobody where they overlap, and are reported', async (t) => {
  const a = { name: 'a', subnet: subnet('10.200.0.0/24') };
  const b = { name: 'b', subnet: subnet('10.200.0.16/28') };
  const c = { name: 'c', subnet: subnet('10.200.1.0/28') };
  const table = new TenantTable([a, b, c]);
  t.same(table.overlaps().map(([x, y]) => [x.name, y.name]), [['a', 'b']]);
  const inBoth = table.identify('10.200.0.18', '10.200.0.20');
  t.ok(!inBoth.ok && /2 registered sandbox networks/.test(inBoth.detail), 'a connection both hold is refused');
  const onlyA = table.identify('10.200.0.2', '10.200.0.3');
  t.ok(onlyA.ok && onlyA.tenant.name === 'a', 'outside the overlap, a is served');
  t.ok(table.identify('10.200.1.2', '10.200.1.3').ok, 'c, beside them');
  const same = new TenantTable([a, { name: 'a2', subnet: subnet('10.200.0.0/24') }]);
  t.equal(same.overlaps().length, 1, 'one subnet registered twice');
  t.notOk(same.identify('10.200.0.2', '10.200.0.3').ok);
});

t.test('a thousand registrations: found by table, not by scan', async (t) => {
  const tenants = Array.from({ length: 1000 }, (_, i) => ({ i, subnet: subnet(`10.${100 + Math.floor(i / 16)}.${(i % 16) * 16}.0/28`) }));
  const table = new TenantTable(tenants);
  t.same(table.overlaps(), []);
  const found = table.identify('10.162.112.2', '10.162.112.9');
  t.ok(found.ok && found.tenant.i === 999, 'the last one');
});
