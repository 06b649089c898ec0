/**
 * The numbers the socket proxy's Lua and the controller's TypeScript share, read from both sides
 * and compared exactly, so that a looser value on either side fails here: the log caps
 * (docker-schema.lua LOG_MAX_BYTES, LOG_MAX_FILES against the deployment config's bounds), the
 * sandbox subnet prefixes (SUBNET_PREFIX_MIN/MAX against address-pool.ts), the private ranges a
 * subnet or the egress proxy's address must lie in (PRIVATE_RANGES on both sides), and the body
 * cap (haproxy.cfg's Content-Length limit against engine-call.ts). Then each bound is asked at its
 * edge on both sides: the largest value one side takes, the other takes; one past it, both refuse.
 * The ceilings of the limits are held the same way in ceilings.test.ts.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { needUnmet } from '../support/needs.js';
import { checkBodies, HAPROXY_DIR, luaMissing } from './lua-checker.js';
import { deploymentConfigSchema, LOG_MAX_FILES_MAX, LOG_MAX_SIZE_MB_MAX } from '../../controller/spec/config.js';
import { PRIVATE_RANGES, SUBNET_PREFIX_MAX, SUBNET_PREFIX_MIN } from '../../controller/spec/address-pool.js';
import { MAX_BODY_BYTES } from '../../controller/docker/engine-call.js';

const MIB = 1024 * 1024;

interface LuaShared {
  log_max_bytes: number;
  log_max_files: number;
  subnet_prefix_min: number;
  subnet_prefix_max: number;
  private_ranges: Array<[number, number]>;
}

function luaShared(): LuaShared {
  const code = `package.path = ${JSON.stringify(`${HAPROXY_DIR}/?.lua;`)} .. package.path
local S = require('docker-schema')
local ranges = {}
for _, r in ipairs(S.PRIVATE_RANGES) do ranges[#ranges + 1] = string.format('[%d,%d]', r[1], r[2]) end
io.write(string.format('{"log_max_bytes":%d,"log_max_files":%d,"subnet_prefix_min":%d,"subnet_prefix_max":%d,"private_ranges":[%s]}',
  S.LOG_MAX_BYTES, S.LOG_MAX_FILES, S.SUBNET_PREFIX_MIN, S.SUBNET_PREFIX_MAX, table.concat(ranges, ',')))`;
  const run = spawnSync('lua5.4', ['-e', code]);
  if (run.status !== 0) throw new Error(run.stderr.toString('utf8'));
  return JSON.parse(run.stdout.toString('utf8')) as LuaShared;
}

const accepts = (config: Record<string, unknown>): boolean => deploymentConfigSchema.safeParse({ endpoint: 'unix:///run/x.sock', ...config }).success;

t.test('the numbers are one set, both ways', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const lua = luaShared();
  t.same(
    [lua.log_max_bytes, lua.log_max_files, lua.subnet_prefix_min, lua.subnet_prefix_max, lua.private_ranges],
    [LOG_MAX_SIZE_MB_MAX * MIB, LOG_MAX_FILES_MAX, SUBNET_PREFIX_MIN, SUBNET_PREFIX_MAX, PRIVATE_RANGES.map(([base, prefix]) => [base, prefix])],
  );
  // haproxy.cfg refuses a Content-Length over the cap before any Lua runs.
  const cfg = readFileSync(join(HAPROXY_DIR, 'haproxy.cfg'), 'utf8');
  const caps = [...cfg.matchAll(/str\(body_too_large\) if has_body \{ req\.hdr_val\(content-length\) gt (\d+) \}/g)].map((m) => Number(m[1]));
  t.same(caps, [MAX_BODY_BYTES], 'one body cap in haproxy.cfg, the controller\'s');
});

t.test('log caps at their edge: the controller\'s largest passes the proxy, one past is refused on both sides', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const body = (size: string, files: string): string => JSON.stringify({
    Image: 'img',
    HostConfig: {
      NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true, CgroupnsMode: 'private',
      PidsLimit: 64, Memory: 64 * MIB, LogConfig: { Type: 'json-file', Config: { 'max-size': size, 'max-file': files } },
    },
  });
  const rows = [
    { name: 'the largest log the controller makes', body: body(`${LOG_MAX_SIZE_MB_MAX}m`, String(LOG_MAX_FILES_MAX)), verdict: 'ok' },
    { name: 'one MiB more', body: body(`${LOG_MAX_SIZE_MB_MAX + 1}m`, '1'), verdict: 'bad_value:LogConfig.Config' },
    { name: 'one byte more', body: body(String(LOG_MAX_SIZE_MB_MAX * MIB + 1), '1'), verdict: 'bad_value:LogConfig.Config' },
    { name: 'one file more', body: body('1m', String(LOG_MAX_FILES_MAX + 1)), verdict: 'bad_value:LogConfig.Config' },
    { name: 'the smallest count, with a leading zero', body: body('1m', '01'), verdict: 'bad_value:LogConfig.Config' },
  ];
  const verdicts = checkBodies(rows.map((r) => ({ route: 'container_create', body: r.body })));
  for (const [i, row] of rows.entries()) t.equal(verdicts[i]?.allowed === true ? 'ok' : verdicts[i]?.reason, row.verdict, `proxy: ${row.name}`);
  t.ok(accepts({ logMaxSizeMb: LOG_MAX_SIZE_MB_MAX, logMaxFiles: LOG_MAX_FILES_MAX }), 'controller: the largest caps');
  t.notOk(accepts({ logMaxSizeMb: LOG_MAX_SIZE_MB_MAX + 1 }), 'controller: one MiB more');
  t.notOk(accepts({ logMaxFiles: LOG_MAX_FILES_MAX + 1 }), 'controller: one file more');
});

t.test('subnet prefixes and private ranges at their edge, on both sides', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const net = (subnet: string): string => JSON.stringify({
    Name: 'cap-x-net', CheckDuplicate: true, Driver: 'bridge', Internal: true,
    Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' }, IPAM: { Config: [{ Subnet: subnet }] },
  });
  const rows = [
    { prefix: SUBNET_PREFIX_MIN, pool: `10.213.0.0/${SUBNET_PREFIX_MIN}`, ok: true },
    { prefix: SUBNET_PREFIX_MAX, pool: '10.213.0.0/16', ok: true },
    { prefix: SUBNET_PREFIX_MIN - 1, pool: `10.212.0.0/${SUBNET_PREFIX_MIN - 1}`, ok: false },
    { prefix: SUBNET_PREFIX_MAX + 1, pool: '10.213.0.0/16', ok: false },
  ];
  const verdicts = checkBodies(rows.map((r) => ({ route: 'network_create', body: net(`${r.pool.split('/')[0]}/${r.prefix}`) })));
  for (const [i, row] of rows.entries()) {
    t.equal(verdicts[i]?.allowed, row.ok, `proxy: a /${row.prefix} subnet`);
    t.equal(accepts({ addressPool: row.pool, subnetPrefix: row.prefix }), row.ok, `controller: /${row.prefix} subnets of ${row.pool}`);
  }
  // Each private range's first and last /29, and the addresses just outside it.
  for (const [base, prefix] of PRIVATE_RANGES) {
    const dotted = (n: number): string => [24, 16, 8, 0].map((s) => (n >>> s) & 255).join('.');
    const last = base + 2 ** (32 - prefix) - 8;
    const edges = [
      { subnet: `${dotted(base)}/29`, ok: true },
      { subnet: `${dotted(last)}/29`, ok: true },
      { subnet: `${dotted(base - 8)}/29`, ok: false },
      { subnet: `${dotted(last + 8)}/29`, ok: false },
    ];
    const v = checkBodies(edges.map((e) => ({ route: 'network_create', body: net(e.subnet) })));
    for (const [i, e] of edges.entries()) {
      t.equal(v[i]?.allowed, e.ok, `proxy: ${e.subnet}`);
      t.equal(accepts({ addressPool: e.subnet, subnetPrefix: 29 }), e.ok, `controller: the pool ${e.subnet}`);
    }
  }
});
