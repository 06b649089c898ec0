/**
 * Runs the socket proxy's body check (haproxy/*.lua, the files the proxy image loads) under a
 * standalone lua5.4, through test/haproxy/lua/check-bodies.lua: one process for a whole batch of
 * bodies, settings from the same environment variables HAProxy reads.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { SOCKET_PROXY_ENV } from '../../common/index.js';
import { toolMissing } from '../support/needs.js';

export const HAPROXY_DIR = fileURLToPath(new URL('../../haproxy', import.meta.url));
export const HARNESS = fileURLToPath(new URL('./lua/check-bodies.lua', import.meta.url));

/** Why the checker cannot run here, or undefined. */
export function luaMissing(): string | undefined {
  return toolMissing('lua5.4', ['-v'], 'apt-get install lua5.4; .ci/run installs it');
}

export interface CheckSettings {
  readonly sharedNetwork?: string;
  readonly volumeDrivers?: string;
  /** SOCKET_PROXY_IMAGES; default TEST_IMAGES. */
  readonly images?: string;
  /** SOCKET_PROXY_REGISTRIES; default none. */
  readonly registries?: string;
  /** SOCKET_PROXY_MAX_PIDS, _MEMORY, _CPUS; default unset (the controller's defaults). */
  readonly maxPids?: string;
  readonly maxMemory?: string;
  readonly maxCpus?: string;
  /** More variables in the environment, as an operator might set them. */
  readonly extra?: Readonly<Record<string, string>>;
}

/** The images the unit tests' bodies name: the controller's own, and the rows' short "img". */
export const TEST_IMAGES = 'img,capybara-sandbox:latest,capybara-sandbox-egress:latest';

/** `networkIds`: the ids the body names networks by, which the proxy proves before it forwards. */
export type Verdict = { readonly allowed: true; readonly view: unknown; readonly networkIds: readonly string[] } | { readonly allowed: false; readonly reason: string };

function settingsEnv(s: CheckSettings): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    [SOCKET_PROXY_ENV.sharedNetwork]: s.sharedNetwork ?? 'capybara-sandbox',
    [SOCKET_PROXY_ENV.dockerSocket]: '/var/run/docker.sock',
    [SOCKET_PROXY_ENV.images]: s.images ?? TEST_IMAGES,
    ...s.extra,
  };
  const optional: Array<[string, string | undefined]> = [
    [SOCKET_PROXY_ENV.volumeDrivers, s.volumeDrivers],
    [SOCKET_PROXY_ENV.registries, s.registries],
    [SOCKET_PROXY_ENV.maxPids, s.maxPids],
    [SOCKET_PROXY_ENV.maxMemory, s.maxMemory],
    [SOCKET_PROXY_ENV.maxCpus, s.maxCpus],
  ];
  for (const [name, value] of optional) {
    if (value !== undefined) env[name] = value;
    else delete env[name];
  }
  return env;
}

/** The checker's verdict on each body (a body given as a string is sent as its UTF-8 bytes). */
export function checkBodies(items: ReadonlyArray<{ route: string; body: string | Buffer }>, settings: CheckSettings = {}): Verdict[] {
  const frames = Buffer.concat(items.flatMap(({ route, body }) => {
    const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
    return [Buffer.from(`${route} ${bytes.length}\n`), bytes];
  }));
  const run = spawnSync('lua5.4', [HARNESS, HAPROXY_DIR], { input: frames, env: settingsEnv(settings), maxBuffer: 1 << 28 });
  if (run.status !== 0) throw new Error(`the checker failed: ${run.stderr.toString('utf8')}`);
  const lines = run.stdout.toString('utf8').split('\n').filter((l) => l !== '');
  if (lines.length !== items.length) throw new Error(`the checker answered ${lines.length} of ${items.length} bodies`);
  return lines.map((line) => {
    if (!line.startsWith('ok ')) return { allowed: false as const, reason: line.replace(/^deny /, '') };
    const [view = '', ids = ''] = line.slice(3).split('\t');
    return { allowed: true as const, view: JSON.parse(view) as unknown, networkIds: ids === '' ? [] : ids.split(',') };
  });
}

/** What loading the settings says: undefined when they load, else the error HAProxy would stop on. */
export function settingsError(settings: CheckSettings): string | undefined {
  const run = spawnSync('lua5.4', [HARNESS, HAPROXY_DIR], { input: '', env: settingsEnv(settings) });
  return run.status === 0 ? undefined : run.stderr.toString('utf8');
}

/** The schema's member paths, "route path" (a map's members as path.*). */
export function schemaPaths(): string[] {
  const run = spawnSync('lua5.4', [HARNESS, HAPROXY_DIR, 'schema'], { env: settingsEnv({}) });
  if (run.status !== 0) throw new Error(run.stderr.toString('utf8'));
  return run.stdout.toString('utf8').split('\n').filter((l) => l !== '').sort();
}
