/**
 * Fuzzes the socket proxy's body check against dockerd's own decoders: test/haproxy/body-fuzz
 * (Go, built against Debian's golang-github-docker-docker-dev, the engine's 20.10 API types)
 * generates 100,000 bodies from every body the controller builds and every allowed body of the
 * case fixture, with keys from Docker's whole API in every letter case, Unicode-folded and
 * escaped, members given twice, values of every type and at their edges, breadth and depth past
 * the caps, blanks and raw bytes; runs each through haproxy/*.lua (the files the proxy image
 * loads) under lua5.4; and reads every body the check allowed with Docker's decoders. A finding
 * is an allowed body that Docker reads differently from the check, cannot read at all, or reads
 * as something the proxy's policy forbids (body-fuzz/policy.go). There must be none.
 */
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { needUnmet, toolMissing } from '../support/needs.js';
import { HAPROXY_DIR, HARNESS, luaMissing, TEST_IMAGES } from './lua-checker.js';
import { controllerBodies, TEST_VOLUME_DRIVER } from './controller-bodies.js';

const BODIES = 100_000;
const SEED = Number(process.env.CAPYBARA_FUZZ_SEED ?? Date.now() % 1_000_000);
/** Debian's copy of Docker's sources (golang-github-docker-docker-dev): the engine's own API types. */
const GOPATH = '/usr/share/gocode';
const SHARED = 'capshared';
/** The fixture's {IMAGE} stands for "img:1" here; the controller's bodies name its own images. */
const IMAGES = `${TEST_IMAGES},img:1`;

interface Summary {
  bodies: number;
  allowed: number;
  allowedByRoute: Record<string, number>;
  reasons: Record<string, number>;
  findings: number;
  findingKinds: Record<string, number>;
  examples: unknown[] | null;
  millis: number;
  maxBody: number;
}

const ROUTES: Record<string, RegExp> = {
  container_create: /^\/(v1\.\d+\/)?containers\/create\?/,
  volume_create: /^\/(v1\.\d+\/)?volumes\/create$/,
  network_create: /^\/(v1\.\d+\/)?networks\/create$/,
  network_connect: /^\/(v1\.\d+\/)?networks\/[^/]+\/connect$/,
  network_disconnect: /^\/(v1\.\d+\/)?networks\/[^/]+\/disconnect$/,
  exec_create: /^\/(v1\.\d+\/)?containers\/[^/]+\/exec$/,
  exec_start: /^\/(v1\.\d+\/)?exec\/[^/]+\/start$/,
};

/** Allowed bodies of the case fixture (placeholders filled), beside the controller's own. */
function fixtureSeeds(): Array<{ route: string; body: string }> {
  const fixture = JSON.parse(readFileSync(new URL('./fixtures/socket-proxy-cases.json', import.meta.url), 'utf8')) as {
    cases: Array<{ method: string; path: string; body: string | null; verdict: string }>;
  };
  const out: Array<{ route: string; body: string }> = [];
  for (const c of fixture.cases) {
    if (c.verdict !== 'allow' || c.method !== 'POST' || c.body === null) continue;
    const route = Object.keys(ROUTES).find((r) => ROUTES[r]?.test(c.path));
    if (route === undefined) continue;
    const body = c.body.replace(/\{P\}/g, 'cap-fz').replace(/\{R\}/g, 'r1').replace(/\{IMAGE\}/g, 'img:1').replace(/\{SHARED\}/g, SHARED);
    out.push({ route, body });
  }
  return out;
}

t.test(`${BODIES} generated bodies: none allowed that Docker reads otherwise`, async (t) => {
  const missing = luaMissing() ?? toolMissing('go', ['version'], 'apt-get install golang-go; .ci/run installs it')
    ?? (existsSync(join(GOPATH, 'src/github.com/docker/docker/runconfig')) ? undefined
      : `no Docker API sources in ${GOPATH} (apt-get install golang-github-docker-docker-dev; .ci/run installs it)`);
  if (missing !== undefined) return needUnmet(t, missing);
  const dir = mkdtempSync(join(tmpdir(), 'capybara-body-fuzz-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const binary = join(dir, 'body-fuzz');
  const started = Date.now();
  // GOPATH mode: Debian packages the Docker sources for it, and nothing is downloaded.
  execFileSync('go', ['build', '-o', binary, '.'], {
    cwd: fileURLToPath(new URL('./body-fuzz', import.meta.url)),
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, GOPATH, GO111MODULE: 'off', GOFLAGS: '', GOCACHE: process.env.GOCACHE ?? join(tmpdir(), 'capybara-go-cache') },
  });
  t.comment(`built the fuzzer in ${Date.now() - started} ms`);

  const seeds = [
    ...controllerBodies(SHARED, { 'dev.capybara.test': 'fuzz' }, 'fz').map((b) => ({ route: b.route, body: JSON.stringify(b.body) })),
    ...fixtureSeeds(),
  ];
  writeFileSync(join(dir, 'seeds.json'), JSON.stringify(seeds));
  // GOGC 400: the fuzzer holds little, and collecting a quarter as often saves a quarter of its CPU.
  const run = spawnSync(binary, [
    '-seeds', join(dir, 'seeds.json'), '-count', String(BODIES), '-seed', String(SEED),
    '-lua', `lua5.4 ${HARNESS} ${HAPROXY_DIR}`, '-shared', SHARED, '-drivers', TEST_VOLUME_DRIVER, '-images', IMAGES,
  ], { maxBuffer: 1 << 26, env: { ...process.env, GOGC: '400' } });
  t.equal(run.status, 0, `the fuzzer ran (seed ${SEED}): ${run.stderr.toString('utf8').slice(0, 2000)}`);
  const summary = JSON.parse(run.stdout.toString('utf8')) as Summary;
  t.comment(`seed ${SEED}: ${summary.bodies} bodies (${seeds.length} seeds, largest ${summary.maxBody} bytes) in ${summary.millis} ms; ` +
    `${summary.allowed} allowed ${JSON.stringify(summary.allowedByRoute)}; refused by ${JSON.stringify(summary.reasons)}; ` +
    `findings ${summary.findings} ${JSON.stringify(summary.findingKinds)}`);
  t.equal(summary.bodies, BODIES, 'every body was generated and checked');
  // The differential only means something when many bodies pass: at least a fifth, of every call.
  t.ok(summary.allowed >= BODIES / 5, `${summary.allowed} of ${BODIES} allowed and compared with Docker's reading`);
  for (const route of Object.keys(ROUTES)) t.ok((summary.allowedByRoute[route] ?? 0) > 100, `${route}: allowed bodies compared`);
  t.same({ findings: summary.findings, examples: summary.examples ?? [] }, { findings: 0, examples: [] },
    `no allowed body that Docker reads differently (CAPYBARA_FUZZ_SEED=${SEED} repeats this run)`);
});
