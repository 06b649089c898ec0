/**
 * memory-plan.ts and memory-budget.ts without sockets: the limit read from a process's cgroup (v1
 * and v2, on a host and inside a container), the plan a limit gives, and the accounting of one
 * client's share against the whole. The proxy refusing past it is memory-budget.test.ts; the
 * figures under a real 256 MiB cgroup are `npm run bench:load`.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { ACCEPT_BYTES, MemoryBudget, parserBytes, requestBytes } from '../../proxy/budget/memory-budget.js';
import { cgroupMemoryLimit, CONNECTION_BYTES, memoryLimit, MIN_MEMORY_BYTES, planMemory } from '../../proxy/budget/memory-plan.js';

const MIB = 1024 * 1024;
const V1_UNLIMITED = '9223372036854771712\n';

/** A reader of a fake /sys/fs/cgroup: the files given, nothing else. */
const files = (map: Record<string, string>) => (path: string): string | undefined => map[path];

t.test('the limit of the process\'s own cgroup and those above it', async (t) => {
  const cases: { name: string; cgroup: string; files: Record<string, string>; limit: number | undefined }[] = [
    {
      name: 'v1 on a host: the memory controller\'s path, limited on the process\'s cgroup',
      cgroup: '9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n',
      files: { '/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes': '268435456\n', '/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes': V1_UNLIMITED, '/sys/fs/cgroup/memory/memory.limit_in_bytes': V1_UNLIMITED },
      limit: 256 * MIB,
    },
    {
      name: 'v1: a parent\'s lower limit binds',
      cgroup: '4:memory:/a/b\n',
      files: { '/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes': '1073741824', '/sys/fs/cgroup/memory/a/memory.limit_in_bytes': '536870912' },
      limit: 512 * MIB,
    },
    {
      name: 'v1 in a container: the host\'s path does not exist, the mount\'s root is the container\'s cgroup',
      cgroup: '12:memory:/docker/0123abcd\n11:cpu,cpuacct:/docker/0123abcd\n',
      files: { '/sys/fs/cgroup/memory/memory.limit_in_bytes': '268435456' },
      limit: 256 * MIB,
    },
    { name: 'v1 with the memory controller among others on one line', cgroup: '5:cpu,memory:/x\n', files: { '/sys/fs/cgroup/memory/x/memory.limit_in_bytes': '200000000' }, limit: 200_000_000 },
    { name: 'v1 "unlimited" (a number near 2^63) is no limit', cgroup: '4:memory:/\n', files: { '/sys/fs/cgroup/memory/memory.limit_in_bytes': V1_UNLIMITED }, limit: undefined },
    { name: 'v2 with a cgroup namespace (a container): memory.max at the root', cgroup: '0::/\n', files: { '/sys/fs/cgroup/memory.max': '268435456\n' }, limit: 256 * MIB },
    {
      name: 'v2 on a host: the lowest on the way up',
      cgroup: '0::/system.slice/egress.service\n',
      files: { '/sys/fs/cgroup/system.slice/egress.service/memory.max': 'max\n', '/sys/fs/cgroup/system.slice/memory.max': '1073741824\n' },
      limit: 1024 * MIB,
    },
    { name: 'v2 "max" is no limit', cgroup: '0::/a\n', files: { '/sys/fs/cgroup/a/memory.max': 'max\n' }, limit: undefined },
    { name: 'no memory controller at all', cgroup: '3:cpu:/\n', files: {}, limit: undefined },
    { name: 'garbage in a limit file is no limit', cgroup: '0::/\n', files: { '/sys/fs/cgroup/memory.max': '12abc' }, limit: undefined },
    { name: 'a path climbing out of the mount is not followed', cgroup: '0::/../../etc\n', files: { '/sys/fs/cgroup/etc/memory.max': '1' }, limit: 1 },
  ];
  for (const c of cases) t.equal(cgroupMemoryLimit(c.cgroup, files(c.files)), c.limit, c.name);
  // This machine's own files parse (whatever they say).
  const own = cgroupMemoryLimit(readFileSync('/proc/self/cgroup', 'utf8'), (path) => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return undefined;
    }
  });
  t.ok(own === undefined || own > 0, `this machine: ${String(own)}`);
});

t.test('the limit is the lowest source known, and says which', async (t) => {
  t.same(memoryLimit({ cgroup: 256 * MIB, flag: undefined, machine: 4096 * MIB }), { bytes: 256 * MIB, source: 'cgroup' });
  t.same(memoryLimit({ cgroup: 256 * MIB, flag: 200 * MIB, machine: 4096 * MIB }), { bytes: 200 * MIB, source: 'flag' });
  t.same(memoryLimit({ cgroup: 256 * MIB, flag: 512 * MIB, machine: 4096 * MIB }), { bytes: 256 * MIB, source: 'cgroup' }, 'the flag never raises the cgroup\'s');
  t.same(memoryLimit({ cgroup: undefined, flag: undefined, machine: 4096 * MIB }), { bytes: 4096 * MIB, source: 'machine' });
  t.same(memoryLimit({ cgroup: undefined, flag: undefined, machine: 23 * 1024 * MIB, heap: 4144 * MIB }), { bytes: 4144 * MIB, source: 'heap' }, 'V8\'s heap limit, named as such');
  t.same(memoryLimit({ cgroup: 256 * MIB, flag: undefined, machine: 23 * 1024 * MIB, heap: 4144 * MIB }), { bytes: 256 * MIB, source: 'cgroup' });
});

t.test('a 256 MiB cgroup: connections at rest fit next to the budget, one client a quarter of it', async (t) => {
  const plan = planMemory({ bytes: 256 * MIB, source: 'cgroup' }, 16_384, 4_096 / 16_384)!;
  t.ok(plan.maxConnections < 16_384, `the connection cap is lowered to ${plan.maxConnections}`);
  t.ok(plan.maxConnections * CONNECTION_BYTES + plan.totalBytes <= 256 * MIB - 64 * MIB, 'connections and budget leave the runtime its reserve');
  t.equal(plan.perClientBytes, Math.floor(plan.totalBytes / 4));
  t.ok(plan.totalBytes >= 64 * MIB, `a budget of ${plan.totalBytes / MIB} MiB`);
  // A client's share holds hundreds of half-sent 32 KiB hellos, not thousands.
  const hellos = Math.floor(plan.perClientBytes / (ACCEPT_BYTES + 33 * 1024));
  t.ok(hellos > 100 && hellos < 1_000, `${hellos} half-sent hellos per client`);
  t.same(planMemory({ bytes: 64 * 1024 * MIB, source: 'machine' }, 16_384, 1)?.maxConnections, 16_384, 'a large limit keeps the configured cap');
  t.equal(planMemory({ bytes: MIN_MEMORY_BYTES - 1, source: 'flag' }, 16_384, 0.25), undefined, 'below the minimum nothing fits');
  t.ok(planMemory({ bytes: MIN_MEMORY_BYTES, source: 'flag' }, 16_384, 0.25)!.maxConnections >= 1);
});

t.test('a client\'s share and the whole budget both bind; what was charged is given back', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 100, perClientBytes: 60 });
  const a = budget.admit('a', 10)!;
  t.ok(a.grow(50), 'up to the share');
  t.notOk(a.grow(1), 'not past it');
  t.equal(budget.usedBy('a'), 60);
  t.equal(budget.admit('a', 1), undefined, 'a new connection from the same client does not fit either');
  const b = budget.admit('b', 40)!;
  t.ok(b, 'another client still fits');
  t.equal(budget.admit('c', 1), undefined, 'the whole budget is used');
  t.equal(a.explain(5), '1 KiB more do not fit: a holds 1 KiB of its 1 KiB share, in bytes not yet decided on', 'its own share, and nothing of the others');
  t.equal(budget.explain('c', 1), "1 KiB more do not fit: c holds 0 KiB of its 1 KiB share, and the proxy's 1 KiB are held, in bytes not yet decided on", 'the budget full, not what the others hold');
  a.shrink(30);
  t.equal(budget.used, 70);
  a.release();
  a.release();
  t.equal(budget.usedBy('a'), 0, 'released once, whatever the calls');
  t.ok(a.grow(1_000), 'a released charge refuses nothing more, and holds nothing');
  t.equal(budget.used, 40);
  b.shrink(1_000);
  t.equal(budget.used, 0, 'never below nothing');
});

t.test('what a parsed request and the parser are charged', async (t) => {
  t.equal(parserBytes(16 * 1024), 192 * 1024);
  const small = requestBytes('http://a.example/', ['Host', 'a.example', 'User-Agent', 'curl/8']);
  t.ok(small > 4 * 1024 && small < 5 * 1024, `an ordinary head: ${small} bytes`);
  const fields = Array.from({ length: 3_000 }, (_, i) => [i.toString(36), '']).flat();
  t.ok(requestBytes('/', fields) > 190 * 1024, '3,000 tiny fields are charged what they cost, not their bytes');
});
