/**
 * The values dockerd treats as instructions, as the socket proxy's body check judges them (run
 * directly under a standalone lua5.4): mount targets and NoCopy (dockerd copies an image's content
 * into an empty volume, following symlinks), image references and registries (dockerd fetches from
 * what a reference names, from the host's network), the shared and sandbox networks' options, the
 * limits' ceilings, the one archive a container may be sent. Row by row, with the reason each
 * refusal must name. The same rules against the real engine behind the real HAProxy, checked by
 * their effect on the host, are in engine-values.test.ts.
 */
import t from 'tap';
import type { Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { needUnmet } from '../support/needs.js';
import { checkBodies, HAPROXY_DIR, luaMissing, settingsError, type CheckSettings } from './lua-checker.js';
import { SOCKET_PROXY_ENV } from '../../common/index.js';
import { WORKSPACE_OWNER_ARCHIVE } from '../../controller/docker/workspace-owner.js';

const PROFILE = '"CapDrop":["ALL"],"SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":true,"PidsLimit":256,"Memory":268435456,"MemorySwap":268435456,"CgroupnsMode":"private"';
const REGISTRY: CheckSettings = { images: 'img', registries: 'registry.example.com' };
const REGISTRY_IMAGE = 'registry.example.com/team/sandbox:1';
const create = (hostConfig: string, image = 'img'): string => `{"Image":${JSON.stringify(image)},"HostConfig":{${PROFILE},"NetworkMode":"none"${hostConfig}}}`;
const limits = (more: string): string => `{"Image":"img","HostConfig":{"CapDrop":["ALL"],"SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":true,"CgroupnsMode":"private","NetworkMode":"none",${more}}}`;
const mount = (m: string): string => create(`,"Mounts":[${m}]`);
const DIGEST = `sha256:${'0123456789abcdef'.repeat(4)}`;
const MIB = 1024 * 1024;

interface Row {
  readonly name: string;
  readonly route: string;
  readonly body: string | Buffer;
  readonly verdict: string;
  readonly settings?: CheckSettings;
}

function judge(t: Test, rows: readonly Row[]): void {
  for (const row of rows) {
    const [v] = checkBodies([{ route: row.route, body: row.body }], row.settings ?? {});
    t.equal(v?.allowed === true ? 'ok' : v?.reason, row.verdict, row.name);
  }
}

t.test('volume mounts: NoCopy always, targets normalised and never the kernel\'s', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const volume = (target: string, options = '"VolumeOptions":{"NoCopy":true}'): string => mount(`{"Type":"volume","Source":"cap-v","Target":${JSON.stringify(target)},${options}}`);
  const rows: Row[] = [
    { name: 'NoCopy true', route: 'container_create', body: volume('/workspace'), verdict: 'ok' },
    { name: 'no VolumeOptions (dockerd copies the image into the volume)', route: 'container_create', body: mount('{"Type":"volume","Source":"cap-v","Target":"/usr"}'), verdict: 'nocopy_required' },
    { name: 'NoCopy false', route: 'container_create', body: volume('/usr', '"VolumeOptions":{"NoCopy":false}'), verdict: 'nocopy_required' },
    { name: 'empty VolumeOptions', route: 'container_create', body: volume('/usr', '"VolumeOptions":{}'), verdict: 'nocopy_required' },
    { name: 'NoCopy as a string', route: 'container_create', body: volume('/usr', '"VolumeOptions":{"NoCopy":"true"}'), verdict: 'nocopy_required' },
    { name: 'NoCopy in another case (one field to Go)', route: 'container_create', body: volume('/usr', '"VolumeOptions":{"nocopy":true}'), verdict: 'forbidden_key:Mounts.VolumeOptions.nocopy' },
    { name: 'NoCopy twice', route: 'container_create', body: volume('/usr', '"VolumeOptions":{"NoCopy":true,"NOCOPY":false}'), verdict: 'duplicate_key:Mounts.VolumeOptions.NoCopy' },
    { name: 'volume labels', route: 'container_create', body: volume('/usr', '"VolumeOptions":{"NoCopy":true,"Labels":{"a":"b"}}'), verdict: 'forbidden_key:Mounts.VolumeOptions.Labels' },
    { name: 'a driver of the mount\'s own', route: 'container_create', body: volume('/usr', '"VolumeOptions":{"NoCopy":true,"DriverConfig":{"Name":"x"}}'), verdict: 'forbidden_key:Mounts.VolumeOptions.DriverConfig' },
    { name: 'VolumeOptions on a tmpfs', route: 'container_create', body: mount('{"Type":"tmpfs","Target":"/t","VolumeOptions":{"NoCopy":true}}'), verdict: 'bad_value:Mounts.VolumeOptions' },
    { name: 'the root', route: 'container_create', body: volume('/'), verdict: 'mount_target_not_allowed:/' },
    { name: '/proc', route: 'container_create', body: volume('/proc'), verdict: 'mount_target_not_allowed:/proc' },
    { name: 'below /proc', route: 'container_create', body: volume('/proc/sys/kernel'), verdict: 'mount_target_not_allowed:/proc/sys/kernel' },
    { name: '/sys/fs/cgroup', route: 'container_create', body: volume('/sys/fs/cgroup'), verdict: 'mount_target_not_allowed:/sys/fs/cgroup' },
    { name: '/dev', route: 'container_create', body: volume('/dev'), verdict: 'mount_target_not_allowed:/dev' },
    { name: '/dev/shm', route: 'container_create', body: volume('/dev/shm'), verdict: 'mount_target_not_allowed:/dev/shm' },
    { name: 'a name that only starts like /dev', route: 'container_create', body: volume('/devices'), verdict: 'ok' },
    { name: 'a name that only starts like /proc', route: 'container_create', body: volume('/procfs'), verdict: 'ok' },
    { name: 'a trailing slash', route: 'container_create', body: volume('/usr/'), verdict: 'mount_target_not_allowed:/usr/' },
    { name: 'a double slash', route: 'container_create', body: volume('//proc'), verdict: 'mount_target_not_allowed://proc' },
    { name: 'a double slash inside', route: 'container_create', body: volume('/usr//bin'), verdict: 'mount_target_not_allowed:/usr//bin' },
    { name: 'a dot segment', route: 'container_create', body: volume('/./proc'), verdict: 'mount_target_not_allowed:/./proc' },
    { name: 'a dot at the end', route: 'container_create', body: volume('/usr/.'), verdict: 'mount_target_not_allowed:/usr/.' },
    { name: 'a dot-dot segment', route: 'container_create', body: volume('/a/../proc'), verdict: 'mount_target_not_allowed:/a/../proc' },
    { name: 'relative', route: 'container_create', body: volume('usr'), verdict: 'mount_target_not_allowed:usr' },
    { name: 'a backslash, named safely in the header', route: 'container_create', body: volume('/a\\nb'), verdict: 'mount_target_not_allowed:/a?nb' },
    { name: 'a colon', route: 'container_create', body: volume('/a:b'), verdict: 'mount_target_not_allowed:/a?b' },
    { name: 'a tmpfs mount on /proc', route: 'container_create', body: mount('{"Type":"tmpfs","Target":"/proc"}'), verdict: 'mount_target_not_allowed:/proc' },
    { name: 'a tmpfs (HostConfig.Tmpfs) on /sys', route: 'container_create', body: create(',"Tmpfs":{"/sys":"nosuid,nodev"}'), verdict: 'mount_target_not_allowed:/sys' },
    { name: 'a tmpfs (HostConfig.Tmpfs) on /', route: 'container_create', body: create(',"Tmpfs":{"/":"nosuid,nodev"}'), verdict: 'mount_target_not_allowed:/' },
    { name: 'a tmpfs (HostConfig.Tmpfs) with a trailing slash', route: 'container_create', body: create(',"Tmpfs":{"/tmp/":"nosuid,nodev"}'), verdict: 'mount_target_not_allowed:/tmp/' },
  ];
  judge(t, rows);
});

t.test('nothing mounted inside a volume (its content is the caller\'s: a symlink there leads the mount anywhere)', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const vol = (target: string, source = 'cap-v'): string => `{"Type":"volume","Source":"${source}","Target":"${target}","VolumeOptions":{"NoCopy":true}}`;
  const tmp = (target: string): string => `{"Type":"tmpfs","Target":"${target}"}`;
  const rows: Row[] = [
    { name: 'a volume inside a volume', route: 'container_create', body: mount(`${vol('/w')},${vol('/w/x', 'cap-u')}`), verdict: 'mount_nested:/w/x' },
    { name: 'the inner one listed first', route: 'container_create', body: mount(`${vol('/w/x/y', 'cap-u')},${vol('/w')}`), verdict: 'mount_nested:/w/x/y' },
    { name: 'a tmpfs mount inside a volume', route: 'container_create', body: mount(`${vol('/w')},${tmp('/w/proc')}`), verdict: 'mount_nested:/w/proc' },
    { name: 'a HostConfig.Tmpfs inside a volume', route: 'container_create', body: create(`,"Mounts":[${vol('/w')}],"Tmpfs":{"/w/t":"nosuid,nodev"}`), verdict: 'mount_nested:/w/t' },
    { name: 'the same volume twice, one inside the other', route: 'container_create', body: mount(`${vol('/w')},${vol('/w/w')}`), verdict: 'mount_nested:/w/w' },
    { name: 'a HostConfig.Tmpfs at a volume\'s own target (mounted over it)', route: 'container_create', body: create(`,"Mounts":[${vol('/w')}],"Tmpfs":{"/w":"nosuid,nodev"}`), verdict: 'mount_nested:/w' },
    { name: 'a tmpfs mount at a volume\'s own target', route: 'container_create', body: mount(`${vol('/w')},${tmp('/w')}`), verdict: 'mount_nested:/w' },
    { name: 'two volumes at one target', route: 'container_create', body: mount(`${vol('/w')},${vol('/w', 'cap-u')}`), verdict: 'mount_nested:/w' },
    { name: 'a sibling that starts with the same letters (two volumes: only where the controller puts them)', route: 'container_create', body: mount(`${vol('/w')},${vol('/wx', 'cap-u')}`), verdict: 'mount_target_not_allowed:/w' },
    // The image's own symlinks lead where the text does not: /var/run is /run in every Debian image.
    { name: 'two volumes that an image symlink nests (/var/run -> /run)', route: 'container_create', body: mount(`${vol('/run')},${vol('/var/run/p/q', 'cap-u')}`), verdict: 'mount_target_not_allowed:/run' },
    { name: 'two volumes, one where the controller puts one', route: 'container_create', body: mount(`${vol('/workspace')},${vol('/lib', 'cap-u')}`), verdict: 'mount_target_not_allowed:/lib' },
    { name: 'the controller\'s three volumes', route: 'container_create', body: create(`,"Mounts":[${vol('/workspace')},${vol('/skills', 'cap-s')},${vol('/opt/capybara/skills', 'cap-s')}],"Tmpfs":{"/opt/capybara":"nosuid,nodev"}`), verdict: 'ok' },
    { name: 'one volume, anywhere clean', route: 'container_create', body: mount(vol('/work')), verdict: 'ok' },
    { name: 'one volume at /etc (dockerd mounts its hosts and resolv.conf files inside it)', route: 'container_create', body: mount(vol('/etc')), verdict: 'mount_target_not_allowed:/etc' },
    { name: 'a working directory under /proc (a descriptor runc may hold: CVE-2024-21626)', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"/proc/self/fd/7","HostConfig"'), verdict: 'bad_value:WorkingDir' },
    { name: 'a working directory elsewhere', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"/workspace","HostConfig"'), verdict: 'ok' },
    // dockerd cleans the working directory (filepath.Clean) before runc changes into it: through
    // the real HAProxy, "//proc/self/fd/7" passed and the container's WorkingDir was /proc/self/fd/7.
    { name: 'a working directory under /proc behind a double slash', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"//proc/self/fd/7","HostConfig"'), verdict: 'bad_value:WorkingDir' },
    { name: 'a working directory under /proc behind a dot segment', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"/./proc/self/fd/7","HostConfig"'), verdict: 'bad_value:WorkingDir' },
    { name: 'a working directory of /sys behind a double slash', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"//sys/fs/cgroup","HostConfig"'), verdict: 'bad_value:WorkingDir' },
    { name: 'a working directory with a trailing slash', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"/workspace/","HostConfig"'), verdict: 'bad_value:WorkingDir' },
    { name: 'the root as the working directory', route: 'container_create', body: create('').replace('"HostConfig"', '"WorkingDir":"/","HostConfig"'), verdict: 'ok' },
    { name: 'a volume inside a tmpfs (the controller\'s skills under /opt/capybara)', route: 'container_create', body: create(`,"Mounts":[${vol('/opt/capybara/skills')}],"Tmpfs":{"/opt/capybara":"nosuid,nodev"}`), verdict: 'ok' },
    { name: 'a tmpfs inside a tmpfs', route: 'container_create', body: create(`,"Mounts":[${tmp('/t/u')}],"Tmpfs":{"/t":"nosuid,nodev"}`), verdict: 'ok' },
    // The images' own symlinks (/var/run -> /run, /sbin -> usr/sbin) lead a mount that runc makes by
    // path into a volume whatever the two strings say, and runc 1.1.5 creates the mount point with
    // os.MkdirAll on a path a racer sharing the volume can swap (CVE-2024-45310): through the real
    // HAProxy, a volume at /run and a tmpfs at /var/run/a/b made runc create a directory on the host
    // within 23 starts. A volume where those symlinks lead is the container's only mount.
    { name: 'a tmpfs an image symlink leads into a volume (/var/run/a/b into /run)', route: 'container_create', body: create(`,"Mounts":[${vol('/run')}],"Tmpfs":{"/var/run/a/b":"nosuid,nodev"}`), verdict: 'mount_target_not_allowed:/run' },
    { name: 'a tmpfs mount an image symlink leads into a volume (/lib/x into /usr/lib)', route: 'container_create', body: mount(`${vol('/usr/lib')},${tmp('/lib/x')}`), verdict: 'mount_target_not_allowed:/usr/lib' },
    { name: 'a volume at a symlink itself (/var/run is /run) with a tmpfs', route: 'container_create', body: mount(`${vol('/var/run')},${tmp('/t')}`), verdict: 'mount_target_not_allowed:/var/run' },
    { name: 'Init with a volume at /usr (runc binds docker-init at /sbin/docker-init)', route: 'container_create', body: create(`,"Init":true,"Mounts":[${vol('/usr')}]`), verdict: 'mount_target_not_allowed:/usr' },
    { name: 'a tmpfs openssl\'s symlink leads into a volume (/usr/lib/ssl/certs/a into /etc/ssl)', route: 'container_create', body: create(`,"Mounts":[${vol('/etc/ssl')}],"Tmpfs":{"/usr/lib/ssl/certs/a":"nosuid,nodev"}`), verdict: 'mount_target_not_allowed:/etc/ssl' },
    { name: 'a tmpfs mount /var/spool/mail leads into a volume at /var/mail', route: 'container_create', body: mount(`${vol('/var/mail')},${tmp('/var/spool/mail/a')}`), verdict: 'mount_target_not_allowed:/var/mail' },
    { name: 'a volume at /usr as the only mount', route: 'container_create', body: mount(vol('/usr')), verdict: 'ok' },
    { name: 'a volume at /usr with Init false', route: 'container_create', body: create(`,"Init":false,"Mounts":[${vol('/usr')}]`), verdict: 'ok' },
    { name: 'a volume elsewhere with a tmpfs and Init (public corpus A12)', route: 'container_create', body: create(`,"Init":true,"Mounts":[${vol('/work')},${tmp('/tmp')}]`), verdict: 'ok' },
    { name: 'a volume at a name that only starts like /run', route: 'container_create', body: mount(`${vol('/runner')},${tmp('/tmp')}`), verdict: 'ok' },
    // An image merely from a listed registry can have any symlink (/opt -> /workspace/o, /workspace
    // -> /etc), through which runc makes mount points in a volume: no volume at all.
    { name: 'a registry\'s image: a volume and a tmpfs', route: 'container_create', body: create(`,"Mounts":[${vol('/workspace')}],"Tmpfs":{"/opt/p/q":"nosuid,nodev"}`, REGISTRY_IMAGE), verdict: 'mount_image_not_listed:/workspace', settings: REGISTRY },
    { name: 'a registry\'s image: a volume and a tmpfs mount', route: 'container_create', body: create(`,"Mounts":[${vol('/work')},${tmp('/tmp')}]`, REGISTRY_IMAGE), verdict: 'mount_image_not_listed:/work', settings: REGISTRY },
    { name: 'a registry\'s image: a volume and Init', route: 'container_create', body: create(`,"Init":true,"Mounts":[${vol('/workspace')}]`, REGISTRY_IMAGE), verdict: 'mount_image_not_listed:/workspace', settings: REGISTRY },
    { name: 'a registry\'s image: the controller\'s two volumes', route: 'container_create', body: create(`,"Mounts":[${vol('/workspace')},${vol('/skills', 'cap-u')}]`, REGISTRY_IMAGE), verdict: 'mount_image_not_listed:/workspace', settings: REGISTRY },
    { name: 'a registry\'s image: a volume alone (/workspace -> /etc lays it over /etc)', route: 'container_create', body: create(`,"Init":false,"Mounts":[${vol('/workspace')}]`, REGISTRY_IMAGE), verdict: 'mount_image_not_listed:/workspace', settings: REGISTRY },
    { name: 'a registry\'s image: tmpfs and Init without a volume', route: 'container_create', body: create(`,"Init":true,"Mounts":[${tmp('/scratch')}],"Tmpfs":{"/tmp":"nosuid,nodev"}`, REGISTRY_IMAGE), verdict: 'ok', settings: REGISTRY },
    { name: 'a listed image: a volume, a tmpfs and Init', route: 'container_create', body: create(`,"Init":true,"Mounts":[${vol('/workspace')}],"Tmpfs":{"/tmp":"nosuid,nodev"}`), verdict: 'ok', settings: REGISTRY },
  ];
  judge(t, rows);
});

t.test('images: listed exactly, or from a listed registry, never readable as an image id', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const hub: CheckSettings = { images: 'img', registries: 'docker.io,registry.example.com:5000' };
  const rows: Row[] = [
    { name: 'a listed image', route: 'container_create', body: create('', 'img'), verdict: 'ok' },
    { name: 'the controller\'s sandbox image', route: 'container_create', body: create('', 'capybara-sandbox:latest'), verdict: 'ok' },
    { name: 'a listed name with the tag dockerd reads it with', route: 'container_create', body: create('', 'img:latest'), verdict: 'ok' },
    { name: 'another tag of a listed name', route: 'container_create', body: create('', 'img:2'), verdict: 'image_not_allowed' },
    { name: 'a listed name:latest, the bare name (an id prefix to dockerd when no such name exists)', route: 'container_create', body: create('', 'abc'), verdict: 'image_not_allowed', settings: { images: 'abc:latest' } },
    { name: 'an image on Docker Hub, no registry listed', route: 'container_create', body: create('', 'alpine:3.19'), verdict: 'image_not_allowed' },
    { name: 'a registry named, none listed', route: 'container_create', body: create('', 'docker.io/library/alpine:3.19'), verdict: 'registry_not_allowed:docker.io' },
    { name: 'the host\'s loopback as a registry', route: 'container_create', body: create('', '127.0.0.1:5000/x:latest'), verdict: 'registry_not_allowed:127.0.0.1:5000' },
    { name: 'localhost', route: 'container_create', body: create('', 'localhost:5000/x'), verdict: 'registry_not_allowed:localhost:5000' },
    { name: 'an id prefix', route: 'container_create', body: create('', '2c7b847deffd'), verdict: 'image_not_allowed' },
    { name: 'a full id', route: 'container_create', body: create('', DIGEST), verdict: 'image_not_allowed' },
    { name: 'no image', route: 'container_create', body: `{"HostConfig":{${PROFILE},"NetworkMode":"none"}}`, verdict: 'image_not_allowed' },
    { name: 'Docker Hub listed: a short name', route: 'container_create', body: create('', 'alpine:3.19'), verdict: 'ok', settings: hub },
    { name: 'Docker Hub listed: a path', route: 'container_create', body: create('', 'library/alpine'), verdict: 'ok', settings: hub },
    { name: 'Docker Hub listed: its old name', route: 'container_create', body: create('', 'index.docker.io/library/alpine:3.19'), verdict: 'ok', settings: hub },
    { name: 'Docker Hub listed: by digest', route: 'container_create', body: create('', `alpine@${DIGEST}`), verdict: 'ok', settings: hub },
    { name: 'Docker Hub listed: an id prefix is still no name', route: 'container_create', body: create('', '2c7b847d'), verdict: 'image_not_allowed', settings: hub },
    { name: 'Docker Hub listed: a short id with its algorithm', route: 'container_create', body: create('', 'sha256:2c7b847d'), verdict: 'image_not_allowed', settings: hub },
    { name: 'Docker Hub listed: upper case (a registry to newer Docker, a path to 20.10)', route: 'container_create', body: create('', 'Alpine/x'), verdict: 'image_not_allowed', settings: hub },
    { name: 'Docker Hub listed: a bad separator', route: 'container_create', body: create('', 'a..b'), verdict: 'image_not_allowed', settings: hub },
    { name: 'Docker Hub listed: two tags', route: 'container_create', body: create('', 'x:a:b'), verdict: 'image_not_allowed', settings: hub },
    { name: 'Docker Hub listed: an empty path component', route: 'container_create', body: create('', 'a//b'), verdict: 'image_not_allowed', settings: hub },
    { name: 'Docker Hub listed: another digest algorithm', route: 'container_create', body: create('', `alpine@sha512:${'a'.repeat(128)}`), verdict: 'image_not_allowed', settings: hub },
    { name: 'a listed registry with its port', route: 'container_create', body: create('', 'registry.example.com:5000/team/x:1'), verdict: 'ok', settings: hub },
    { name: 'a listed registry on another port', route: 'container_create', body: create('', 'registry.example.com/team/x'), verdict: 'registry_not_allowed:registry.example.com', settings: hub },
    { name: 'a registry that contains a listed one', route: 'container_create', body: create('', 'registry.example.com.evil.net:5000/x'), verdict: 'registry_not_allowed:registry.example.com.evil.net:5000', settings: hub },
    { name: 'a pull of a listed image', route: 'image_pull', body: 'fromImage=img:latest', verdict: 'ok' },
    { name: 'a pull without a tag (every tag of the name)', route: 'image_pull', body: 'fromImage=img', verdict: 'image_tag_required' },
    { name: 'a pull without a tag, from a listed registry', route: 'image_pull', body: 'fromImage=docker.io%2Flibrary%2Falpine', verdict: 'image_tag_required', settings: hub },
    { name: 'a pull by digest', route: 'image_pull', body: `fromImage=alpine%40${DIGEST}`, verdict: 'ok', settings: hub },
    { name: 'a pull, percent-encoded as Go decodes it', route: 'image_pull', body: 'fromImage=im%67:latest', verdict: 'ok' },
    { name: 'a pull of the host\'s loopback', route: 'image_pull', body: 'fromImage=127.0.0.1%3A5000%2Fx%3Alatest', verdict: 'registry_not_allowed:127.0.0.1:5000' },
    { name: 'a pull from a listed registry, encoded', route: 'image_pull', body: 'fromImage=docker.io%2Flibrary%2Falpine%3A3.19', verdict: 'ok', settings: hub },
    { name: 'a pull with a cut escape', route: 'image_pull', body: 'fromImage=img%6', verdict: 'image_not_allowed' },
    { name: 'a pull with a bad escape', route: 'image_pull', body: 'fromImage=i%zzg', verdict: 'image_not_allowed' },
    { name: 'a pull that encodes its own "%"', route: 'image_pull', body: 'fromImage=img%2525', verdict: 'image_not_allowed' },
    { name: 'a pull with a second parameter', route: 'image_pull', body: 'fromImage=img&tag=x', verdict: 'image_not_allowed' },
    { name: 'an inspect of a listed image', route: 'image_inspect', body: '/images/capybara-sandbox:latest/json', verdict: 'ok' },
    { name: 'an inspect of an id prefix (which local images exist)', route: 'image_inspect', body: '/images/2c7b847d/json', verdict: 'image_not_allowed' },
    { name: 'an inspect of an image not listed', route: 'image_inspect', body: '/images/alpine:3.19/json', verdict: 'image_not_allowed' },
    { name: 'an inspect of a full id', route: 'image_inspect', body: `/images/${DIGEST}/json`, verdict: 'image_not_allowed' },
    { name: 'an inspect from a listed registry', route: 'image_inspect', body: '/images/registry.example.com:5000/team/x:1/json', verdict: 'ok', settings: hub },
  ];
  judge(t, rows);
});

t.test('networks: the shared one without inter-container traffic, every other one internal', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const net = (name: string, more: string): string => `{"Name":"${name}","CheckDuplicate":true,"Driver":"bridge"${more}}`;
  const ICC = '"com.docker.network.bridge.enable_icc"';
  const INHIBIT = '"com.docker.network.bridge.inhibit_ipv4"';
  const rows: Row[] = [
    { name: 'the shared network, as the controller makes it', route: 'network_create', body: net('capybara-sandbox', `,"Options":{${ICC}:"false"}`), verdict: 'ok' },
    { name: 'the shared network without options (icc on)', route: 'network_create', body: net('capybara-sandbox', ''), verdict: 'network_option_required:enable_icc' },
    { name: 'the shared network with icc on', route: 'network_create', body: net('capybara-sandbox', `,"Options":{${ICC}:"true"}`), verdict: 'network_option_required:enable_icc' },
    { name: 'the shared network internal', route: 'network_create', body: net('capybara-sandbox', `,"Internal":true,"Options":{${ICC}:"false"}`), verdict: 'network_option_not_allowed:Internal' },
    { name: 'the shared network without a host address', route: 'network_create', body: net('capybara-sandbox', `,"Options":{${ICC}:"false",${INHIBIT}:"true"}`), verdict: 'network_option_not_allowed:inhibit_ipv4' },
    { name: 'a sandbox network, as the controller makes it', route: 'network_create', body: net('cap-x-net', `,"Internal":true,"Options":{${INHIBIT}:"true"},"IPAM":{"Config":[{"Subnet":"10.213.7.16/28"}]}`), verdict: 'ok' },
    { name: 'a cap- network with NAT out', route: 'network_create', body: net('cap-x-net', ''), verdict: 'network_option_required:Internal' },
    { name: 'a cap- network, Internal false', route: 'network_create', body: net('cap-x-net', ',"Internal":false'), verdict: 'network_option_required:Internal' },
    { name: 'a cap- network with NAT out and no host address', route: 'network_create', body: net('cap-x-net', `,"Options":{${INHIBIT}:"true"}`), verdict: 'network_option_required:Internal' },
    { name: 'an internal cap- network from dockerd\'s pools (public corpus A08)', route: 'network_create', body: net('cap-x-net', ',"Internal":true,"IPAM":{"Driver":"default"}'), verdict: 'ok' },
    { name: 'an internal cap- network with a subnet and a host address', route: 'network_create', body: net('cap-x-net', ',"Internal":true,"IPAM":{"Config":[{"Subnet":"10.213.7.16/28"}]}'), verdict: 'network_option_required:inhibit_ipv4' },
  ];
  judge(t, rows);
});

t.test('limits: at most the ceilings, the controller\'s own by default', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const body = (pids: number, memory: number, more = ''): string => limits(`"PidsLimit":${pids},"Memory":${memory},"MemorySwap":${memory}${more}`);
  const small: CheckSettings = { maxPids: '256', maxMemory: '512', maxCpus: '0.5' };
  const rows: Row[] = [
    { name: 'at the default ceilings', route: 'container_create', body: body(1024, 16384 * MIB, ',"NanoCpus":4000000000'), verdict: 'ok' },
    { name: 'one pid above', route: 'container_create', body: body(1025, MIB * 256), verdict: 'limit_above_ceiling:PidsLimit' },
    { name: 'past the host\'s pid_max', route: 'container_create', body: body(4194304, MIB * 256), verdict: 'limit_above_ceiling:PidsLimit' },
    { name: 'one byte above the memory ceiling', route: 'container_create', body: body(256, 16384 * MIB + 1), verdict: 'limit_above_ceiling:Memory' },
    { name: '2^63 - 4096 bytes', route: 'container_create', body: body(256, 9223372036854771712), verdict: 'limit_above_ceiling:Memory' },
    { name: 'one nano-CPU above', route: 'container_create', body: body(256, MIB * 256, ',"NanoCpus":4000000001'), verdict: 'limit_above_ceiling:NanoCpus' },
    { name: 'a tmpfs of half the memory ceiling', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=8g"}'), verdict: 'ok' },
    { name: 'a tmpfs above it', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=8193m"}'), verdict: 'limit_above_ceiling:Tmpfs' },
    { name: 'a tmpfs of size 0 (no limit to the kernel)', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=0"}'), verdict: 'limit_above_ceiling:Tmpfs' },
    // The kernel reads size= as memparse() does: strtoull with base 0 (a leading 0 is octal), then
    // shifted by the unit modulo 2^64. Through the real HAProxy to dockerd the first of these made a
    // /tmp of 6.9 EiB (df) that the check had read as 7 GiB.
    { name: 'a tmpfs size with a leading zero that wraps past 2^64 (7 GiB in decimal, 7 EiB in octal)', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=005654066747146247g"}'), verdict: 'bad_value:Tmpfs' },
    { name: 'a tmpfs size with a leading zero (octal to the kernel)', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=0100000000"}'), verdict: 'bad_value:Tmpfs' },
    { name: 'a tmpfs size whose product with its unit wraps past 2^64 (2^34 + 1 GiB)', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=17179869185g"}'), verdict: 'limit_above_ceiling:Tmpfs' },
    { name: 'a tmpfs size past 2^63 in its digits alone', route: 'container_create', body: body(256, MIB * 256, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=9999999999999999999"}'), verdict: 'limit_above_ceiling:Tmpfs' },
    { name: 'a tmpfs mount at the ceiling', route: 'container_create', body: body(256, MIB * 256, `,"Mounts":[{"Type":"tmpfs","Target":"/t","TmpfsOptions":{"SizeBytes":${8192 * MIB}}}]`), verdict: 'ok' },
    { name: 'a tmpfs mount above it', route: 'container_create', body: body(256, MIB * 256, `,"Mounts":[{"Type":"tmpfs","Target":"/t","TmpfsOptions":{"SizeBytes":${8192 * MIB + 1}}}]`), verdict: 'limit_above_ceiling:Mounts.TmpfsOptions.SizeBytes' },
    { name: 'lower ceilings: at them', route: 'container_create', body: body(256, 512 * MIB, ',"NanoCpus":500000000,"Tmpfs":{"/tmp":"nosuid,nodev,size=256m"}'), verdict: 'ok', settings: small },
    { name: 'lower ceilings: a pid above', route: 'container_create', body: body(257, 512 * MIB), verdict: 'limit_above_ceiling:PidsLimit', settings: small },
    { name: 'lower ceilings: memory above', route: 'container_create', body: body(256, 513 * MIB), verdict: 'limit_above_ceiling:Memory', settings: small },
    { name: 'lower ceilings: CPU above', route: 'container_create', body: body(256, 512 * MIB, ',"NanoCpus":500000001'), verdict: 'limit_above_ceiling:NanoCpus', settings: small },
    { name: 'lower ceilings: tmpfs above half the memory', route: 'container_create', body: body(256, 512 * MIB, ',"Tmpfs":{"/tmp":"nosuid,nodev,size=257m"}'), verdict: 'limit_above_ceiling:Tmpfs', settings: small },
  ];
  judge(t, rows);
});

t.test('the one archive: the controller\'s bytes exactly', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const flipped = Buffer.from(WORKSPACE_OWNER_ARCHIVE);
  flipped[108] = 0x31; // another uid
  const rows: Row[] = [
    { name: 'the controller\'s archive', route: 'container_archive', body: WORKSPACE_OWNER_ARCHIVE, verdict: 'ok' },
    { name: 'one byte changed', route: 'container_archive', body: flipped, verdict: 'archive_not_allowed' },
    { name: 'one more block', route: 'container_archive', body: Buffer.concat([WORKSPACE_OWNER_ARCHIVE, Buffer.alloc(512)]), verdict: 'archive_not_allowed' },
    { name: 'cut short', route: 'container_archive', body: WORKSPACE_OWNER_ARCHIVE.subarray(0, 1024), verdict: 'archive_not_allowed' },
    { name: 'empty', route: 'container_archive', body: Buffer.alloc(0), verdict: 'archive_not_allowed' },
  ];
  judge(t, rows);
});

t.test('the variables the misspelling check knows are exactly those the controller sets', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const code = `package.path = ${JSON.stringify(`${HAPROXY_DIR}/?.lua;`)} .. package.path
io.write(table.concat(require('proxy-settings').VARIABLES, ','))`;
  const run = spawnSync('lua5.4', ['-e', code]);
  t.equal(run.status, 0, run.stderr.toString('utf8'));
  t.same(run.stdout.toString('utf8').split(',').sort(), Object.values(SOCKET_PROXY_ENV).sort());
});

t.test('settings: images, registries and ceilings HAProxy would have to guess about', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const rows: Array<{ name: string; settings: CheckSettings; loads: boolean; names?: string }> = [
    { name: 'the project\'s images', settings: { images: 'capybara-sandbox:latest,capybara-sandbox-egress:latest' }, loads: true },
    { name: 'an image of a named registry', settings: { images: 'registry.example.com:5000/team/img:1' }, loads: true },
    { name: 'no images at all', settings: { images: '' }, loads: true },
    { name: 'an image on the host\'s loopback', settings: { images: '127.0.0.1:5000/x' }, loads: false, names: 'SOCKET_PROXY_IMAGES' },
    { name: 'an image on localhost', settings: { images: 'localhost/x' }, loads: false, names: 'SOCKET_PROXY_IMAGES' },
    { name: 'an id prefix as an image', settings: { images: 'deadbeef' }, loads: false, names: 'SOCKET_PROXY_IMAGES' },
    { name: 'an upper-case image', settings: { images: 'IMG' }, loads: false, names: 'SOCKET_PROXY_IMAGES' },
    { name: 'an empty image entry', settings: { images: 'img,' }, loads: false, names: 'SOCKET_PROXY_IMAGES' },
    { name: 'Docker Hub', settings: { registries: 'docker.io' }, loads: true },
    { name: 'a registry with its port', settings: { registries: 'registry.example.com:5000' }, loads: true },
    { name: 'an IP literal', settings: { registries: '127.0.0.1' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'a private address with a port', settings: { registries: '10.0.0.1:5000' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'a number as a host (an address to inet_aton)', settings: { registries: '2130706433' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'a hex last label', settings: { registries: 'x.0x7f' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'localhost', settings: { registries: 'localhost:5000' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'below localhost', settings: { registries: 'reg.localhost' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'a name without a dot', settings: { registries: 'registry' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'upper case', settings: { registries: 'Registry.example.com' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'a port with a leading zero', settings: { registries: 'registry.example.com:05000' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'a scheme', settings: { registries: 'https://registry.example.com' }, loads: false, names: 'SOCKET_PROXY_REGISTRIES' },
    { name: 'lower ceilings', settings: { maxPids: '256', maxMemory: '512', maxCpus: '0.5' }, loads: true },
    { name: 'pids 0', settings: { maxPids: '0' }, loads: false, names: 'SOCKET_PROXY_MAX_PIDS' },
    { name: 'pids negative', settings: { maxPids: '-1' }, loads: false, names: 'SOCKET_PROXY_MAX_PIDS' },
    { name: 'pids with an exponent', settings: { maxPids: '1e3' }, loads: false, names: 'SOCKET_PROXY_MAX_PIDS' },
    { name: 'pids past pid_max\'s limit', settings: { maxPids: '4194305' }, loads: false, names: 'SOCKET_PROXY_MAX_PIDS' },
    { name: 'memory with a unit', settings: { maxMemory: '16g' }, loads: false, names: 'SOCKET_PROXY_MAX_MEMORY' },
    { name: 'memory with a leading zero', settings: { maxMemory: '0512' }, loads: false, names: 'SOCKET_PROXY_MAX_MEMORY' },
    { name: 'CPUs 0', settings: { maxCpus: '0' }, loads: false, names: 'SOCKET_PROXY_MAX_CPUS' },
    { name: 'CPUs not a number', settings: { maxCpus: 'all' }, loads: false, names: 'SOCKET_PROXY_MAX_CPUS' },
    { name: 'a ceiling misspelt (its default, 1024, would hold)', settings: { extra: { SOCKET_PROXY_MAX_PID: '64' } }, loads: false, names: 'did you mean SOCKET_PROXY_MAX_PIDS' },
    { name: 'images in lower case', settings: { extra: { socket_proxy_images: 'img' } }, loads: false, names: 'did you mean SOCKET_PROXY_IMAGES' },
    { name: 'the engine socket cut short', settings: { extra: { DOCKER_SOCK: '/run/docker.sock' } }, loads: false, names: 'did you mean DOCKER_SOCKET' },
    { name: 'a setting the proxy does not have', settings: { extra: { SOCKET_PROXY_ALLOW_ALL: '1' } }, loads: false, names: 'SOCKET_PROXY_ALLOW_ALL is set, which the socket proxy does not read' },
    { name: 'an unrelated variable', settings: { extra: { DOCKER_HOST: 'unix:///x', HAPROXY_LOCALPEER: 'x' } }, loads: true },
  ];
  for (const row of rows) {
    const error = settingsError(row.settings);
    t.equal(error === undefined, row.loads, `${row.name}: ${row.loads ? 'loads' : `refused (${error?.trim().split('\n')[0] ?? ''})`}`);
    if (!row.loads && row.names !== undefined) t.match(error, row.names, `${row.name}: the error names ${row.names}`);
  }
});
