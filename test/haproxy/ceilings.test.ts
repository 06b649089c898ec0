/**
 * The socket proxy's limit ceilings and the controller's are one set of numbers: the defaults of
 * SOCKET_PROXY_MAX_PIDS, _MEMORY and _CPUS (haproxy/proxy-settings.lua) are the controller's own
 * (PIDS_LIMIT, the default maxLimits of the deployment config), read from both sides and compared
 * exactly, so that a looser Lua value fails here as surely as a tighter one. Then the proxy, with its
 * defaults, is asked at each ceiling and one past it, with values computed from the controller's
 * numbers: the largest sandbox the controller would make passes, one more pid, byte of memory or of
 * tmpfs, or nano-CPU, is refused.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { needUnmet } from '../support/needs.js';
import { checkBodies, HAPROXY_DIR, luaMissing } from './lua-checker.js';
import { deploymentConfigSchema } from '../../controller/spec/config.js';
import { PIDS_LIMIT } from '../../controller/spec/limits.js';

const MIB = 1024 * 1024;

function luaDefaults(): Record<string, number> {
  const code = `package.path = ${JSON.stringify(`${HAPROXY_DIR}/?.lua;`)} .. package.path
local d = require('proxy-settings').DEFAULTS
io.write(string.format('{"max_pids":%s,"max_memory_mb":%s,"max_cpus":%s}', d.max_pids, d.max_memory_mb, d.max_cpus))`;
  const run = spawnSync('lua5.4', ['-e', code]);
  if (run.status !== 0) throw new Error(run.stderr.toString('utf8'));
  return JSON.parse(run.stdout.toString('utf8')) as Record<string, number>;
}

t.test('the proxy\'s default ceilings are the controller\'s, both ways', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const controller = deploymentConfigSchema.parse({ endpoint: 'unix:///run/x.sock' }).maxLimits;
  t.same(luaDefaults(), { max_pids: PIDS_LIMIT, max_memory_mb: controller.memoryMb, max_cpus: controller.cpu });
});

t.test('with its defaults, the proxy admits the controller\'s largest sandbox and nothing past it', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const controller = deploymentConfigSchema.parse({ endpoint: 'unix:///run/x.sock' }).maxLimits;
  const memory = controller.memoryMb * MIB;
  const nanoCpus = Math.round(controller.cpu * 1e9);
  // The controller sizes /tmp at half the memory (spec/limits.ts).
  const tmp = Math.floor(memory / 2);
  const body = (pids: number, mem: number, cpus: number, tmpBytes: number): string => JSON.stringify({
    Image: 'img',
    HostConfig: {
      NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true, CgroupnsMode: 'private',
      PidsLimit: pids, Memory: mem, MemorySwap: mem, NanoCpus: cpus, Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${tmpBytes}` },
    },
  });
  const rows = [
    { name: 'at every ceiling', body: body(PIDS_LIMIT, memory, nanoCpus, tmp), verdict: 'ok' },
    { name: 'one pid more', body: body(PIDS_LIMIT + 1, memory, nanoCpus, tmp), verdict: 'limit_above_ceiling:PidsLimit' },
    { name: 'one byte of memory more', body: body(PIDS_LIMIT, memory + 1, nanoCpus, tmp), verdict: 'limit_above_ceiling:Memory' },
    { name: 'one nano-CPU more', body: body(PIDS_LIMIT, memory, nanoCpus + 1, tmp), verdict: 'limit_above_ceiling:NanoCpus' },
    { name: 'one byte of tmpfs more', body: body(PIDS_LIMIT, memory, nanoCpus, tmp + 1), verdict: 'limit_above_ceiling:Tmpfs' },
  ];
  const verdicts = checkBodies(rows.map((r) => ({ route: 'container_create', body: r.body })));
  for (const [i, row] of rows.entries()) {
    const v = verdicts[i];
    t.equal(v?.allowed === true ? 'ok' : v?.reason, row.verdict, row.name);
  }
});
