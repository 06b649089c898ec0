/**
 * The socket proxy's memory limit holds what haproxy.cfg lets it allocate. Every connection up to
 * `maxconn` may hold a request buffer and a response buffer of `tune.bufsize` (an exec stream or a
 * pull moves data both ways; a request whose body is still arriving holds its buffer for
 * `timeout http-request`), and Lua may take `tune.lua.maxmem` besides. A container whose memory
 * limit is below that is OOM-killed at load the configuration admits, every exec stream with it,
 * instead of refusing the connection past `maxconn` (SECURITY.md, section 2, slots): with 64 KiB
 * buffers, 4,096 connections each holding one partly sent 32 KiB body are already 256 MiB.
 * Checked for both containers that run the image: deploy/compose.yaml's and `capybara-sandbox up`'s.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { HAPROXY_DIR } from './lua-checker.js';
import { socketProxyBody } from '../../controller/operator/socket-proxy-spec.js';

const MIB = 1024 * 1024;
/** What HAProxy itself, its pools, connection and stream structures and the kernel's socket buffers need besides. */
const HEADROOM = 64 * MIB;

function globalNumber(cfg: string, key: string): number {
  const global = cfg.slice(cfg.indexOf('\nglobal\n'), cfg.indexOf('\ndefaults\n'));
  const m = global.match(new RegExp(`^\\s+${key.replace(/\./g, '\\.')}\\s+(\\d+)\\s*$`, 'm'));
  if (!m) throw new Error(`haproxy.cfg global has no ${key}`);
  return Number(m[1]);
}

const cfg = readFileSync(join(HAPROXY_DIR, 'haproxy.cfg'), 'utf8');
const maxconn = globalNumber(cfg, 'maxconn');
const bufsize = globalNumber(cfg, 'tune.bufsize');
const luaMaxmem = globalNumber(cfg, 'tune.lua.maxmem') * MIB;
const needed = maxconn * 2 * bufsize + luaMaxmem + HEADROOM;

function composeBytes(limit: string): number {
  const m = /^(\d+)([kmg])$/.exec(limit);
  if (!m) throw new Error(`unexpected mem_limit ${limit}`);
  return Number(m[1]) * { k: 1024, m: MIB, g: 1024 * MIB }[m[2] as 'k' | 'm' | 'g'];
}

t.test('the configuration\'s own numbers', async (t) => {
  t.ok(maxconn > 0 && bufsize > 0 && luaMaxmem > 0, `maxconn ${maxconn}, bufsize ${bufsize}, Lua ${luaMaxmem / MIB} MiB: ${Math.ceil(needed / MIB)} MiB needed`);
});

t.test('deploy/compose.yaml gives the socket proxy the memory haproxy.cfg may use', async (t) => {
  const compose = parse(readFileSync(fileURLToPath(new URL('../../deploy/compose.yaml', import.meta.url)), 'utf8')) as {
    services: Record<string, { mem_limit?: string }>;
  };
  const limit = compose.services['socket-proxy']?.mem_limit;
  t.ok(limit, 'a memory limit');
  if (limit) t.ok(composeBytes(limit) >= needed, `mem_limit ${limit} holds ${Math.ceil(needed / MIB)} MiB`);
});

t.test('`capybara-sandbox up` gives its socket proxy the memory haproxy.cfg may use', async (t) => {
  const body = socketProxyBody({
    name: 'p', image: 'proxy:1', socketDir: '/run/x', engineSocket: '/var/run/docker.sock', sharedNetwork: 'capybara-sandbox',
    volumeDriver: undefined, images: ['capybara-sandbox:latest'], ceilings: { pids: 1024, memoryMb: 1024, cpus: 1 }, labels: {},
  }) as { HostConfig: { Memory?: number } };
  const memory = body.HostConfig.Memory ?? 0;
  t.ok(memory >= needed, `Memory ${memory / MIB} MiB holds ${Math.ceil(needed / MIB)} MiB`);
});
