/**
 * One source of truth for what the socket proxy lets through: haproxy/docker-schema.lua is
 * derived from the bodies the controller builds, and this test keeps the two equal. Every member
 * path of every body the controller builds (controller-bodies.ts: every tier, option and
 * recovery path) is in the schema, and every path in the schema is one the controller sends or
 * one of the few extras below, each with the reason it is allowed. A new member in the controller
 * fails here until the schema names it; a member left in the schema after the controller stopped
 * sending it fails here too.
 */
import t from 'tap';
import { needUnmet } from '../support/needs.js';
import { luaMissing, schemaPaths } from './lua-checker.js';
import { controllerBodies } from './controller-bodies.js';

/** Schema members the controller never sends, and why each is allowed anyway. */
const EXTRAS: Record<string, string> = {
  'container_create HostConfig.Mounts[].TmpfsOptions': 'tmpfs mounts (public corpus A12; own case O146)',
  'container_create HostConfig.Mounts[].TmpfsOptions.SizeBytes': 'the size of a tmpfs mount (public corpus A12)',
  'container_create HostConfig.Mounts[].TmpfsOptions.Mode': 'the mode of a tmpfs mount (own case O146)',
  'container_create HostConfig.Privileged': 'false only (public corpus A12)',
  'container_create HostConfig.OomScoreAdj': '0 to 1000: a higher score only makes the container the OOM killer\'s first choice (own case O146)',
  'container_create NetworkingConfig': 'one settings-free endpoint on the NetworkMode network (public corpus A12)',
  'container_create NetworkingConfig.EndpointsConfig': 'as above',
  'container_create NetworkingConfig.EndpointsConfig.*': 'as above',
  'exec_create Privileged': 'false only (the corpus refuses true in any letter case)',
  'network_create IPAM.Driver': 'the default IPAM driver by name (public corpus A08)',
};

/** Member paths of a body, as the schema names them: a map's members (a path the schema lists as "path.*") as path.*. */
function bodyPaths(route: string, value: unknown, path: string, maps: ReadonlySet<string>, out: Set<string>): void {
  if (Array.isArray(value)) {
    for (const item of value) bodyPaths(route, item, `${path}[]`, maps, out);
    return;
  }
  if (value === null || typeof value !== 'object') return;
  const isMap = maps.has(`${route} ${path}.*`);
  for (const [key, member] of Object.entries(value)) {
    const p = isMap ? `${path}.*` : path === '' ? key : `${path}.${key}`;
    out.add(`${route} ${p}`);
    bodyPaths(route, member, p, maps, out);
  }
}

t.test('the schema names exactly what the controller sends, and the listed extras', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const schema = new Set(schemaPaths());
  const maps = new Set([...schema].filter((p) => p.endsWith('.*')));
  const sent = new Set<string>();
  for (const b of controllerBodies('capybara-sandbox', { 'dev.capybara.test': 'sync' })) bodyPaths(b.route, b.body, '', maps, sent);
  t.same([...sent].filter((p) => !schema.has(p)).sort(), [], 'every member the controller sends is in the schema');
  t.same([...schema].filter((p) => !sent.has(p) && EXTRAS[p] === undefined).sort(), [], 'every member of the schema is sent by the controller or listed as an extra');
  t.same(Object.keys(EXTRAS).filter((p) => !schema.has(p) || sent.has(p)).sort(), [], 'every extra is in the schema and not (or no longer) sent by the controller');
});
