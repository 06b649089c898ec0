/**
 * Names written once in common/ and copied where another language has to spell them: the base
 * image digest in every Dockerfile's `ARG BASE=` line and in the README, the image names the
 * build script tags (it reads common/images.json, never a name of its own), and the socket
 * proxy's variables as haproxy.cfg reads them and its Dockerfile and deploy/compose.yaml set them.
 */
import t from 'tap';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { parse } from 'yaml';
import { IMAGES, SOCKET_PROXY_ENV } from '../../common/index.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const read = (path: string): string => readFileSync(join(root, path), 'utf8');
const source = JSON.parse(read('common/images.json')) as { images: Record<string, string>; dockerfileBase: string };

/** Every Dockerfile of the project (not under node_modules or dist). */
function dockerfiles(dir = ''): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const path = dir === '' ? e.name : `${dir}/${e.name}`;
    if (e.isDirectory()) return ['node_modules', 'dist', '.git'].includes(e.name) ? [] : dockerfiles(path);
    return e.name === 'Dockerfile' ? [path] : [];
  });
}

t.test('the TypeScript names are the JSON names', async (t) => {
  t.same({ ...IMAGES }, source.images);
  t.same(Object.keys(IMAGES).sort(), ['cli', 'egress', 'proxy', 'sandbox'], 'one name per image build-images.sh builds');
});

t.test('every Dockerfile defaults BASE to the one pinned base', async (t) => {
  t.match(source.dockerfileBase, /^debian:[a-z]+-slim@sha256:[0-9a-f]{64}$/, 'pinned by digest');
  const files = dockerfiles();
  t.same(files.sort(), ['haproxy/Dockerfile', 'image/cli/Dockerfile', 'image/egress/Dockerfile', 'image/sandbox/Dockerfile']);
  for (const file of files) {
    const lines = read(file).split('\n').filter((l) => /^ARG BASE=/.test(l));
    t.same(lines, [`ARG BASE=${source.dockerfileBase}`], `${file}: ARG BASE=`);
  }
});

t.test('the README names the same base', async (t) => {
  const named = [...read('README.md').matchAll(/debian:[a-z]+-slim@sha256:[0-9a-f]+/g)].map((m) => m[0]);
  t.ok(named.length > 0, 'the README names the base');
  for (const name of named) t.equal(name, source.dockerfileBase);
});

t.test('the build script takes every image name from common/images.json', async (t) => {
  const script = read('scripts/build-images.sh');
  t.match(script, 'require("./common/images.json")');
  // Comments may show the names; code must not spell one.
  const code = script.split('\n').filter((l) => !/^\s*#/.test(l)).join('\n');
  for (const name of Object.values(IMAGES)) t.notOk(code.includes(name), `no ${name} in its code`);
});

t.test('the socket proxy reads exactly the variables of SOCKET_PROXY_ENV', async (t) => {
  const names: string[] = Object.values(SOCKET_PROXY_ENV).sort();
  const cfg = read('haproxy/haproxy.cfg').split('\n').filter((l) => !/^\s*#/.test(l)).join('\n');
  // The Lua body check reads its settings itself (haproxy/proxy-settings.lua): getenv('NAME').
  const lua = readdirSync(join(root, 'haproxy')).filter((f) => f.endsWith('.lua'))
    .map((f) => read(`haproxy/${f}`).split('\n').filter((l) => !/^\s*--/.test(l)).join('\n')).join('\n');
  const read_ = new Set([
    ...[...cfg.matchAll(/\$\{([A-Z_][A-Z0-9_]*)\}|defined\(([A-Z_][A-Z0-9_]*)\)|env\(([A-Z_][A-Z0-9_]*)\)/g)].map((m) => m[1] ?? m[2] ?? m[3]),
    ...[...lua.matchAll(/getenv\('([A-Z_][A-Z0-9_]*)'\)/g)].map((m) => m[1]),
  ]);
  t.same([...read_].sort(), names, 'haproxy.cfg and haproxy/*.lua');
  const env = /^ENV ((?:.*\\\n)*.*)$/m.exec(read('haproxy/Dockerfile'))?.[1] ?? '';
  const set = [...env.matchAll(/([A-Z_][A-Z0-9_]*)=/g)].map((m) => m[1]);
  t.ok(set.length > 0 && set.every((v) => names.includes(v ?? '')), `haproxy/Dockerfile sets only these: ${set.join(', ')}`);
  const compose = parse(read('deploy/compose.yaml')) as { services: Record<string, { environment?: Record<string, string> }> };
  const composed = Object.keys(compose.services['socket-proxy']?.environment ?? {});
  t.ok(composed.length > 0 && composed.every((v) => names.includes(v)), `deploy/compose.yaml sets only these: ${composed.join(', ')}`);
});
