/**
 * The judge of the socket proxy's archive proof (haproxy/archive-proof.lua), run directly under a
 * standalone lua5.4 on answers dockerd could give to a container inspect. An archive goes on only
 * when the container has exactly one mount point, a volume where the archive goes, whatever its
 * image: a second mount of any kind (each of which dockerd mounts and unmounts on the host for
 * the call, and which could lie inside the other through the image's symlinks) refuses, and so
 * does every answer that is not what dockerd sends. The same proof against the real HAProxy and engine is in
 * socket-proxy-cases.test.ts (A30, A33, R03) and mount-symlink-race.test.ts.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { needUnmet } from '../support/needs.js';
import { HAPROXY_DIR, luaMissing } from './lua-checker.js';

const HARNESS = fileURLToPath(new URL('./lua/judge-archive.lua', import.meta.url));
const ID = '0123456789abcdef'.repeat(4);
const NAME = 'cap-s1';

interface Row {
  readonly name: string;
  readonly container?: string;
  readonly route?: string;
  readonly status?: number;
  readonly body: string;
  readonly verdict: string;
}

function judge(rows: readonly Row[]): string[] {
  const input = Buffer.concat(
    rows.flatMap((r) => [Buffer.from(`${r.container ?? NAME} ${r.route ?? 'container_archive'} ${r.status ?? 200} ${Buffer.byteLength(r.body)}\n`), Buffer.from(r.body)]),
  );
  const run = spawnSync('lua5.4', [HARNESS, HAPROXY_DIR], { input });
  if (run.status !== 0) throw new Error(run.stderr.toString());
  return run.stdout.toString().split('\n').filter((l) => l !== '');
}

const volume = (destination: string, name = 'cap-s1-workspace'): string =>
  `{"Type":"volume","Name":"${name}","Source":"/var/lib/docker/volumes/${name}/_data","Destination":"${destination}","Driver":"local","Mode":"z","RW":true,"Propagation":""}`;
const tmpfs = (destination: string): string => `{"Type":"tmpfs","Source":"","Destination":"${destination}","Mode":"","RW":true,"Propagation":""}`;
const bind = (destination: string): string => `{"Type":"bind","Source":"/etc","Destination":"${destination}","Mode":"","RW":false,"Propagation":"rprivate"}`;

/** dockerd's network files of a container that never ran: none (set at its first start). */
const NEVER_STARTED = '"ResolvConfPath":"","HostnamePath":"","HostsPath":""';
const files = (dir = `/var/lib/docker/containers/${ID}`): string => `"ResolvConfPath":"${dir}/resolv.conf","HostnamePath":"${dir}/hostname","HostsPath":"${dir}/hosts"`;

/** An inspect answer as dockerd gives one (the parts that matter, and a few that do not). */
function inspect(mounts: readonly string[], more: { id?: string; name?: string; networks?: number; image?: string; files?: string } = {}): string {
  const networks = Array.from({ length: more.networks ?? 1 }, (_, i) => `"cap-s${i}-net":{"IPAMConfig":null,"Links":null,"Aliases":["s"],"NetworkID":"${ID}","EndpointID":"${ID}","Gateway":"","IPAddress":"10.213.${i >> 8}.${i & 255}","IPPrefixLen":28,"MacAddress":"02:42:0a:d5:00:02","DriverOpts":null}`);
  return (
    `{"Id":"${more.id ?? ID}","Created":"2026-12-04T00:00:00Z","Path":"/usr/bin/tini","Args":["--","sleep"],"State":{"Status":"created","Running":false},` +
    `"Name":"${more.name ?? `/${NAME}`}",${more.files ?? NEVER_STARTED},"HostConfig":{"Tmpfs":{"/tmp":"rw,exec,nosuid,nodev,size=1048576,mode=1777"},"Mounts":[]},` +
    `"Mounts":[${mounts.join(',')}],"Config":{"Env":["HOME=/workspace","NOTE=Privileged \\u00e9"],"Image":"${more.image ?? 'capybara-sandbox:latest'}","Labels":{"dev.capybara.sandbox":"1"}},` +
    `"NetworkSettings":{"Networks":{${networks.join(',')}}}}`
  );
}

t.test('an archive goes on only into a container whose one mount point is a volume where it goes', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const rows: Row[] = [
    { name: 'a hand-over container as the controller makes it: the workspace alone', container: 'cap-s1.handover', body: inspect([volume('/workspace')], { name: '/cap-s1.handover', image: 'capybara-sandbox-egress:latest' }), verdict: `ok ${ID}` },
    { name: 'of any image: with one mount point, its symlinks have nothing to nest', container: 'cap-s1.handover', body: inspect([volume('/workspace')], { name: '/cap-s1.handover', image: 'registry.example/team/sandbox:1' }), verdict: `ok ${ID}` },
    {
      name: 'a hand-over container that has run: dockerd would mount its resolv.conf, hosts and hostname too, through the volume where the image\'s symlinks lead them',
      container: 'cap-s1.handover',
      body: inspect([volume('/workspace')], { name: '/cap-s1.handover', files: files() }),
      verdict: 'archive_container_started',
    },
    {
      name: 'one network file alone is enough',
      container: 'cap-s1.handover',
      body: inspect([volume('/workspace')], { name: '/cap-s1.handover', files: files().replace(/"(HostnamePath|HostsPath)":"[^"]*"/g, '"$1":""') }),
      verdict: 'archive_container_started',
    },
    {
      name: 'a network file path missing from the answer',
      container: 'cap-s1.handover',
      body: inspect([volume('/workspace')], { name: '/cap-s1.handover', files: '"ResolvConfPath":"","HostnamePath":""' }),
      verdict: 'archive_proof_failed',
    },
    {
      name: 'a network file path that is not a string',
      container: 'cap-s1.handover',
      body: inspect([volume('/workspace')], { name: '/cap-s1.handover', files: '"ResolvConfPath":null,"HostnamePath":"","HostsPath":""' }),
      verdict: 'archive_proof_failed',
    },
    {
      name: 'a never-started container of another name: the workspace goes only into a hand-over container, which the proxy never starts',
      body: inspect([volume('/workspace')]),
      verdict: 'archive_container_not_handover',
    },
    {
      name: 'a name that merely holds ".handover"',
      container: 'cap-s1.handover-x',
      body: inspect([volume('/workspace')], { name: '/cap-s1.handover-x' }),
      verdict: 'archive_container_not_handover',
    },
    {
      name: 'a sandbox as the controller makes it (three mount points, which an image\'s /opt -> /workspace/o would nest)',
      body: inspect([volume('/workspace'), volume('/skills', 'cap-s1-skills'), volume('/opt/capybara/skills', 'cap-s1-skills')]),
      verdict: 'archive_mount_not_allowed:/opt/capybara/skills',
    },
    {
      name: 'a registration into an egress container',
      container: 'cap-s1-egress',
      route: 'tenant_register',
      body: inspect([volume('/var/lib/capybara-egress/tenants', 'cap-s1-egress-policy')], { name: '/cap-s1-egress' }),
      verdict: `ok ${ID}`,
    },
    {
      name: 'a shard on 600 sandbox networks (an answer far broader than any request body)',
      container: 'cap-egress.0.capybara-sandbox',
      route: 'tenant_register',
      body: inspect([volume('/var/lib/capybara-egress/tenants', 'cap-egress.0.capybara-sandbox-tenants')], { name: '/cap-egress.0.capybara-sandbox', networks: 600 }),
      verdict: `ok ${ID}`,
    },
    {
      name: 'a registration into an egress container of an image from a listed registry (its symlinks could lead /etc into the registration volume)',
      container: 'cap-s1-egress',
      route: 'tenant_register',
      body: inspect([volume('/var/lib/capybara-egress/tenants', 'cap-s1-egress-policy')], { name: '/cap-s1-egress', image: 'registry.example/team/egress:1', files: files() }),
      verdict: 'archive_image_not_listed:registry.example/team/egress:1',
    },
    {
      name: 'a running egress container of a listed image: its network files resolve through its read-only root',
      container: 'cap-s1-egress',
      route: 'tenant_register',
      body: inspect([volume('/var/lib/capybara-egress/tenants', 'cap-s1-egress-policy')], { name: '/cap-s1-egress', image: 'capybara-sandbox-egress:latest', files: files() }),
      verdict: `ok ${ID}`,
    },
    {
      name: 'a registration into a container whose answer has no Config.Image',
      container: 'cap-s1-egress',
      route: 'tenant_register',
      body: inspect([volume('/var/lib/capybara-egress/tenants', 'cap-s1-egress-policy')], { name: '/cap-s1-egress' }).replace(/"Image":"[^"]*",/, ''),
      verdict: 'archive_proof_failed',
    },
    { name: 'the review\'s shape: a volume at /run and a tmpfs mount the image\'s /var/run leads into it', body: inspect([volume('/workspace'), volume('/run', 'v'), tmpfs('/var/run/b')]), verdict: 'archive_mount_not_allowed:/run' },
    { name: 'a tmpfs mount beside the workspace', body: inspect([tmpfs('/tmp'), volume('/workspace')]), verdict: 'archive_mount_not_allowed:/tmp' },
    { name: 'the offender named is the first by path, whatever dockerd\'s order', body: inspect([volume('/workspace'), tmpfs('/zz'), volume('/work', 'w'), tmpfs('/tmp')]), verdict: 'archive_mount_not_allowed:/tmp' },
    { name: 'a bind mount', body: inspect([volume('/workspace'), bind('/workspace/etc')]), verdict: 'archive_mount_not_allowed:/workspace/etc' },
    { name: 'a volume elsewhere', body: inspect([volume('/work')]), verdict: 'archive_mount_not_allowed:/work' },
    { name: 'a volume at another of the controller\'s targets', body: inspect([volume('/skills', 'cap-s1-skills')]), verdict: 'archive_mount_not_allowed:/skills' },
    { name: 'a tmpfs mount where the archive goes', body: inspect([tmpfs('/workspace')]), verdict: 'archive_mount_not_allowed:/workspace' },
    { name: 'two volumes where the archive goes', body: inspect([volume('/workspace'), volume('/workspace', 'v')]), verdict: 'archive_mount_not_allowed:/workspace' },
    { name: 'no mount at all', body: inspect([]), verdict: 'archive_target_not_volume:/workspace' },
    { name: 'a registration into a container without the registration volume', route: 'tenant_register', body: inspect([volume('/workspace')]), verdict: 'archive_mount_not_allowed:/workspace' },
    { name: 'no such container', status: 404, body: '{"message":"No such container: cap-s1"}', verdict: 'container_not_found' },
    { name: 'dockerd failed', status: 500, body: '{"message":"boom"}', verdict: 'archive_proof_failed' },
    { name: 'no answer at all', status: 0, body: '', verdict: 'archive_proof_failed' },
    { name: 'another container\'s answer', body: inspect([volume('/workspace')], { name: '/cap-s2' }), verdict: 'archive_proof_failed' },
    { name: 'an id prefix', body: inspect([volume('/workspace')], { id: ID.slice(0, 12) }), verdict: 'archive_proof_failed' },
    { name: 'an id in upper case', body: inspect([volume('/workspace')], { id: ID.toUpperCase() }), verdict: 'archive_proof_failed' },
    { name: 'Mounts twice (the last one empty)', body: inspect([tmpfs('/tmp')]).replace('"Config":', '"Mounts":[],"Config":'), verdict: 'archive_proof_failed' },
    { name: 'a mount without its type', body: inspect([`{"Destination":"/workspace"}`]), verdict: 'archive_proof_failed' },
    { name: 'a mount type twice', body: inspect([`{"Type":"volume","Destination":"/workspace","Type":"bind"}`]), verdict: 'archive_proof_failed' },
    { name: 'Mounts null', body: inspect([]).replace('"Mounts":[],"Config"', '"Mounts":null,"Config"'), verdict: 'archive_proof_failed' },
    { name: 'a list, not an object', body: `[${inspect([volume('/workspace')])}]`, verdict: 'archive_proof_failed' },
    { name: 'trailing bytes', body: `${inspect([volume('/workspace')])}x`, verdict: 'archive_proof_failed' },
    { name: 'not JSON', body: 'cap-s1', verdict: 'archive_proof_failed' },
    { name: 'a route with no archive destination', route: 'container_create', body: inspect([volume('/workspace')]), verdict: 'archive_proof_failed' },
  ];
  const verdicts = judge(rows);
  t.equal(verdicts.length, rows.length, 'one verdict per answer');
  for (const [i, row] of rows.entries()) t.equal(verdicts[i], row.verdict, row.name);
});
