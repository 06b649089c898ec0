/**
 * Fuzzes the socket proxy's check of registration archives (haproxy/tenant-archive.lua, route
 * tenant_register) against what dockerd and the egress make of them: 20,000 archives generated
 * from the encoder's (every registration of registrations.ts and the case fixture's) by changing
 * header fields (names with paths, links, PAX and GNU headers, modes, owners, sizes, with and
 * without a fixed checksum), the content (members dropped, added, retyped, at their edges; other
 * JSON spellings) and the framing (blocks added or cut, a second entry, gzip, which dockerd
 * unpacks). Every archive the check allows is extracted by Docker 20.10's own pkg/archive with the
 * options dockerd uses for PUT /containers/<name>/archive (test/haproxy/untar), and its file read
 * by the egress's parser (policy/tenants.ts parseSlotFile). A finding is an allowed archive that
 * dockerd fails on or extracts as anything but one regular file `<slot>.json`, 0644, root's, with
 * the content the check read, or whose content the egress reads otherwise or not at all.
 */
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { gzipSync } from 'node:zlib';
import { registrationArchive } from '../../common/index.js';
import { parseSlotFile } from '../../policy/index.js';
import { needUnmet, toolMissing } from '../support/needs.js';
import { checkBodies, luaMissing } from './lua-checker.js';
import { MTIME, REGISTRATIONS, tarOf } from './registrations.js';

const ARCHIVES = 20_000;
const SEED = Number(process.env.CAPYBARA_FUZZ_SEED ?? Date.now() % 1_000_000);
/** Debian's copy of Docker's sources (golang-github-docker-docker-dev): dockerd's own pkg/archive. */
const GOPATH = '/usr/share/gocode';

/** mulberry32: a small seeded PRNG, so that CAPYBARA_FUZZ_SEED repeats a run. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

interface Seed {
  slot: string;
  value: unknown;
}

function fixtureSeed(): Seed {
  const fixture = JSON.parse(readFileSync(new URL('./fixtures/socket-proxy-cases.json', import.meta.url), 'utf8')) as { cases: Array<{ id: string; body: string | null }> };
  const body = Buffer.from(fixture.cases.find((c) => c.id === 'R02')?.body ?? '', 'latin1');
  const size = parseInt(body.subarray(124, 135).toString('latin1'), 8);
  return { slot: 's0', value: JSON.parse(body.subarray(512, 512 + size).toString('utf8')) as unknown };
}

const STRINGS = ['', 'a', 'A', 'cap-x', '..', '.', '/', 'a/b', '/etc/passwd', '\\', '"', 'é', '\u2028', '\u0000', 'a'.repeat(64), 'a'.repeat(254), '*.example.com', 'Example.com', 'GET', 'get', 'CONNECT', '/x?y', '/a/*', 'tls', 'opaque', 'raw', 'enforce', 'report', 'off',
  '10.200.0.0/28', '10.200.0.14', '10.200.0.0', '10.200.0.15', '010.200.0.0/28', '10.200.0.0/31', '10.200.0.1/28', '::1', 'abcdefgh', 'abcdefg', 'a_b-c.d', '<<', 'true', '1'];
const NUMBERS = [0, 1, -1, 2, 22, 80, 443, 65535, 65536, 1.5, -0, 1e21, 2 ** 53 + 2];
const KEYS = ['version', 'vacant', 'sandbox', 'lifecycle', 'subnet', 'address', 'policy', 'allowHosts', 'connectPorts', 'mode', 'host', 'tunnel', 'methods', 'paths', 'inspect', 'secrets', 'Version', 'extra', '__proto__', '<<'];

function pick<T>(rand: () => number, list: readonly T[]): T {
  return list[Math.floor(rand() * list.length)] as T;
}

function randomValue(rand: () => number, depth = 0): unknown {
  const r = rand();
  if (r < 0.35) return pick(rand, STRINGS);
  if (r < 0.6) return pick(rand, NUMBERS);
  if (r < 0.68) return rand() < 0.5;
  if (r < 0.72) return null;
  if (r < 0.86 || depth > 2) return Array.from({ length: Math.floor(rand() * 3) }, () => randomValue(rand, depth + 1));
  return Object.fromEntries(Array.from({ length: Math.floor(rand() * 3) }, () => [pick(rand, KEYS), randomValue(rand, depth + 1)]));
}

/** Every container (object or array) of a value, with how to replace or drop its members. */
function containers(value: unknown, out: Array<Record<string, unknown> | unknown[]> = []): Array<Record<string, unknown> | unknown[]> {
  if (value !== null && typeof value === 'object') {
    out.push(value as Record<string, unknown> | unknown[]);
    for (const member of Object.values(value)) containers(member, out);
  }
  return out;
}

function mutateValue(rand: () => number, seed: unknown): unknown {
  const value = structuredClone(seed);
  const rounds = 1 + Math.floor(rand() * 2);
  for (let i = 0; i < rounds; i++) {
    const target = pick(rand, containers(value));
    const r = rand();
    if (Array.isArray(target)) {
      if (r < 0.3 && target.length > 0) target.splice(Math.floor(rand() * target.length), 1);
      else if (r < 0.6) target.push(rand() < 0.5 && target.length > 0 ? structuredClone(pick(rand, target)) : randomValue(rand));
      else if (target.length > 0) target[Math.floor(rand() * target.length)] = randomValue(rand);
    } else {
      const keys = Object.keys(target);
      if (r < 0.25 && keys.length > 0) delete target[pick(rand, keys)];
      else if (r < 0.5) target[pick(rand, KEYS)] = rand() < 0.3 ? structuredClone(pick(rand, containers(seed))) : randomValue(rand);
      else if (keys.length > 0) target[pick(rand, keys)] = randomValue(rand);
    }
  }
  return value;
}

/** The value as JSON, mostly as JSON.stringify writes it, sometimes spelled otherwise. */
function spell(rand: () => number, value: unknown): string {
  const json = JSON.stringify(value) ?? 'null';
  const r = rand();
  if (r < 0.8) return `${json}\n`;
  if (r < 0.84) return `${JSON.stringify(value, null, 1)}\n`;
  if (r < 0.88) return `${json.replace(/\//g, '\\/')}\n`;
  if (r < 0.92) return `${json.replace(/"a/g, '"\\u0061')}\n`;
  if (r < 0.95) return json;
  if (r < 0.98) return ` ${json}\r\n`;
  return `${json}\n\n`;
}

const NAMES = ['s0.json', 'S0.json', '../s0.json', 'a/s0.json', '/s0.json', './s0.json', '.wh.s0.json', 's0.json/', 's0', '.json', 's0.json\u0000x', `${'a'.repeat(63)}.json`, `${'a'.repeat(64)}.json`, 'a..json', 'a.b.json'];
/** [offset, length, candidates] of the header fields, each candidate written over the field. */
const FIELDS: Array<[number, number, readonly string[]]> = [
  [0, 100, NAMES],
  [100, 8, ['0000644\0', '0000755\0', '0004644\0', '0000644 ', '644\0\0\0\0\0', '0000600\0', '0100644\0']],
  [108, 8, ['0000000\0', '0001750\0', '       \0', '\0\0\0\0\0\0\0\0']],
  [116, 8, ['0000000\0', '0001750\0']],
  [124, 12, ['00000000000\0', '00000000001\0', '00000001000\0', '\x80\0\0\0\0\0\0\0\0\0\x01\x00', '77777777777\0']],
  [136, 12, ['00000000000\0', '77777777777\0', '1234567890a\0', '           \0']],
  [156, 1, ['0', '\0', '1', '2', '3', '4', '5', '6', '7', 'x', 'g', 'L', 'K', 'S', 'D', 'M', 'V']],
  [157, 100, ['\0', '/etc/passwd', 's0.json', '..']],
  [257, 8, ['ustar\x0000', 'ustar  \0', '\0\0\0\0\0\0\0\0', 'ustar\x0001']],
  [265, 32, ['\0', 'root', 'nobody']],
  [297, 32, ['\0', 'root']],
  [329, 8, ['0000000\0', '0000001\0']],
  [345, 155, ['\0', 'etc', '..', 'a/b']],
  [500, 12, ['\0', 'x']],
];

function fixChecksum(archive: Buffer): void {
  archive.write(' '.repeat(8), 148, 'latin1');
  const sum = archive.subarray(0, 512).reduce((a, b) => a + b, 0);
  archive.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
}

/** A registration the schema admits, from random parts: what makes many different archives pass. */
function validValue(rand: () => number): unknown {
  const word = (alphabet: string, min: number, max: number): string =>
    Array.from({ length: min + Math.floor(rand() * (max - min + 1)) }, () => alphabet[Math.floor(rand() * alphabet.length)]).join('');
  const host = (): string => (rand() < 0.2 ? '*.' : '') + Array.from({ length: 1 + Math.floor(rand() * 3) }, () => word('abcdefghijklmnopqrstuvwxyz0123456789-', 1, 12)).join('.');
  const prefix = 16 + Math.floor(rand() * 15);
  const size = 2 ** (32 - prefix);
  const base = Math.floor(rand() * 2 ** (prefix - 8)) * size + 10 * 2 ** 24;
  const dotted = (n: number): string => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
  const entry = (): unknown => {
    const r = rand();
    if (r < 0.5) return host();
    if (r < 0.7) return { host: host(), tunnel: pick(rand, ['tls', 'opaque']) };
    return { host: host(), methods: Array.from({ length: 1 + Math.floor(rand() * 3) }, () => pick(rand, ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'])), paths: Array.from({ length: 1 + Math.floor(rand() * 3) }, () => `/${word('abcxyz09-._~', 0, 10)}${pick(rand, ['', '/*'])}`) };
  };
  const policy: Record<string, unknown> = { allowHosts: Array.from({ length: Math.floor(rand() * 6) }, entry) };
  if (rand() < 0.7) policy.connectPorts = Array.from({ length: 1 + Math.floor(rand() * 4) }, () => 1 + Math.floor(rand() * 65535));
  if (rand() < 0.5) policy.mode = pick(rand, ['enforce', 'report']);
  if (rand() < 0.3) policy.version = 1;
  return {
    version: 1, sandbox: `cap-${word('abcdef0123456789', 1, 20)}`, lifecycle: word('ABCDEFabcdef0123456789-', 8, 64),
    subnet: `${dotted(base)}/${prefix}`, address: dotted(base + 1 + Math.floor(rand() * (size - 2))), policy,
  };
}

function generate(rand: () => number, seeds: readonly Seed[]): Buffer {
  const seed = rand() < 0.25 ? { slot: `${pick(rand, ['s', 'slot-', 'a.b_'])}${Math.floor(rand() * 4096)}`, value: validValue(rand) } : pick(rand, seeds);
  const r = rand();
  if (r < 0.45) {
    // The content: a mutated value, in some spelling.
    return tarOf(`${seed.slot}.json`, spell(rand, rand() < 0.15 ? seed.value : mutateValue(rand, seed.value)));
  }
  const archive = Buffer.from(tarOf(`${seed.slot}.json`, `${JSON.stringify(seed.value)}\n`));
  if (r < 0.85) {
    // A header field or two, or a random byte, mostly with the checksum made right again.
    for (let i = 0, n = 1 + Math.floor(rand() * 2); i < n; i++) {
      if (rand() < 0.2) {
        archive[Math.floor(rand() * 512)] = Math.floor(rand() * 256);
        continue;
      }
      const [offset, length, candidates] = pick(rand, FIELDS);
      archive.fill(0, offset, offset + length);
      archive.write(pick(rand, candidates).slice(0, length), offset, 'latin1');
    }
    if (rand() < 0.85) fixChecksum(archive);
    return archive;
  }
  // The framing.
  const k = rand();
  if (k < 0.2) return Buffer.concat([archive, Buffer.alloc(512)]);
  if (k < 0.4) return archive.subarray(0, archive.length - 512);
  if (k < 0.55) return Buffer.concat([archive.subarray(0, archive.length - 1024), tarOf('s1.json', `${JSON.stringify(seed.value)}\n`)]);
  if (k < 0.7) return gzipSync(archive);
  if (k < 0.85) return archive.subarray(0, Math.floor(rand() * archive.length));
  const dirty = Buffer.from(archive);
  dirty[512 + Math.floor(rand() * (archive.length - 512))] = Math.floor(rand() * 256);
  return dirty;
}

interface Extracted {
  error?: string;
  files: Array<{ path: string; kind: string; mode: string; uid: number; gid: number; content?: string }>;
}

/** What is wrong with an allowed archive, as dockerd and the egress read it; undefined when nothing. */
function finding(archive: Buffer, extracted: Extracted): string | undefined {
  const name = archive.subarray(0, 100).toString('latin1').replace(/\0+$/, '');
  const size = parseInt(archive.subarray(124, 135).toString('latin1'), 8);
  const content = archive.subarray(512, 512 + size).toString('utf8');
  if (extracted.error !== undefined) return `dockerd's untar failed: ${extracted.error}`;
  const expected = [{ path: name, kind: 'file', mode: '644', uid: 0, gid: 0, content }];
  if (JSON.stringify(extracted.files) !== JSON.stringify(expected)) return `dockerd made ${JSON.stringify(extracted.files)}`;
  if (!/^[a-z0-9][a-z0-9_.-]{0,62}\.json$/.test(name)) return `a file named ${JSON.stringify(name)}`;
  let parsed;
  try {
    parsed = parseSlotFile(content, name);
  } catch (err) {
    return `the egress cannot read it: ${String(err)}`;
  }
  const value = JSON.parse(content) as Record<string, unknown> & { policy?: Record<string, unknown> };
  if (parsed.vacant) return value.vacant === true ? undefined : 'the egress reads it as vacant';
  const seen = { sandbox: parsed.sandbox, lifecycle: parsed.lifecycle, subnet: parsed.subnet.text, address: parsed.address, allowHosts: parsed.policy.allowHosts, mode: parsed.policy.mode };
  const sent = { sandbox: value.sandbox, lifecycle: value.lifecycle, subnet: value.subnet, address: value.address, allowHosts: value.policy?.allowHosts, mode: value.policy?.mode };
  // Members in any order (zod writes an object's members in its schema's order).
  if (!isDeepStrictEqual(JSON.parse(JSON.stringify(seen)), JSON.parse(JSON.stringify(sent)))) return `the egress reads ${JSON.stringify(seen)}`;
  if (value.policy?.connectPorts !== undefined && JSON.stringify(parsed.policy.connectPorts) !== JSON.stringify(value.policy.connectPorts)) return 'the egress reads other ports';
  return undefined;
}

t.test(`${ARCHIVES} generated registration archives: none allowed that dockerd or the egress reads otherwise`, async (t) => {
  const missing = luaMissing() ?? toolMissing('go', ['version'], 'apt-get install golang-go; .ci/run installs it')
    ?? (existsSync(join(GOPATH, 'src/github.com/docker/docker/pkg/archive')) ? undefined
      : `no Docker sources in ${GOPATH} (apt-get install golang-github-docker-docker-dev; .ci/run installs it)`);
  if (missing !== undefined) return needUnmet(t, missing);
  const dir = mkdtempSync(join(tmpdir(), 'capybara-untar-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const binary = join(dir, 'untar');
  execFileSync('go', ['build', '-o', binary, '.'], {
    cwd: fileURLToPath(new URL('./untar', import.meta.url)),
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, GOPATH, GO111MODULE: 'off', GOFLAGS: '', GOCACHE: process.env.GOCACHE ?? join(tmpdir(), 'capybara-go-cache') },
  });

  const rand = prng(SEED);
  const seeds: Seed[] = [...REGISTRATIONS.map(({ slot, value }) => ({ slot, value: value as unknown })), fixtureSeed()];
  for (const { slot, value } of REGISTRATIONS) t.same(registrationArchive(slot, value, MTIME), tarOf(`${slot}.json`, `${JSON.stringify(value)}\n`), `${slot}: the seeds are the encoder's bytes`);
  const archives = Array.from({ length: ARCHIVES }, () => generate(rand, seeds));
  const verdicts = checkBodies(archives.map((body) => ({ route: 'tenant_register', body })));
  const allowed = archives.filter((_, i) => verdicts[i]?.allowed === true);
  const reasons: Record<string, number> = {};
  for (const v of verdicts) if (!v.allowed) reasons[v.reason.replace(/:.*/, '')] = (reasons[v.reason.replace(/:.*/, '')] ?? 0) + 1;

  const frames = Buffer.concat(allowed.flatMap((a) => [Buffer.from(`${a.length}\n`), a]));
  const run = spawnSync(binary, [], { input: frames, maxBuffer: 1 << 28 });
  t.equal(run.status, 0, `dockerd's untar ran: ${run.stderr.toString('utf8').slice(0, 2000)}`);
  const results = run.stdout.toString('utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Extracted);
  t.equal(results.length, allowed.length, 'every allowed archive extracted');
  const findings = allowed.flatMap((a, i) => {
    const problem = finding(a, results[i] ?? { error: 'no answer', files: [] });
    return problem === undefined ? [] : [{ problem, archive: a.toString('latin1').slice(0, 1200) }];
  });
  const distinct = new Set(allowed.map((a) => a.toString('latin1'))).size;
  t.comment(`seed ${SEED}: ${ARCHIVES} archives, ${allowed.length} allowed (${distinct} distinct), refused by ${JSON.stringify(reasons)}; findings ${findings.length}`);
  // The differential only means something when many archives pass, and many different ones.
  t.ok(allowed.length >= ARCHIVES / 10 && distinct >= 200, `${allowed.length} allowed, ${distinct} distinct, extracted and compared`);
  t.same(findings.slice(0, 5), [], `no allowed archive that dockerd or the egress reads otherwise (CAPYBARA_FUZZ_SEED=${SEED} repeats this run)`);
});
