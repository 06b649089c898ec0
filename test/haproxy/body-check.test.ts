/**
 * The socket proxy's body check (haproxy/json-strict.lua, body-check.lua, docker-schema.lua,
 * proxy-settings.lua) run directly, under a standalone lua5.4: every body the controller builds
 * passes and is read as sent; the settings refuse what would make HAProxy guess; the parser's
 * caps and refusals, row by row. The same cases against the real HAProxy and engine are in
 * socket-proxy-cases.test.ts; the fuzzing in body-fuzz.test.ts.
 */
import t from 'tap';
import { needUnmet } from '../support/needs.js';
import { checkBodies, luaMissing, settingsError } from './lua-checker.js';
import { controllerBodies, TEST_VOLUME_DRIVER } from './controller-bodies.js';

const SHARED = 'capybara-sandbox';
const PROFILE = '"CapDrop":["ALL"],"SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":true,"PidsLimit":256,"Memory":268435456,"MemorySwap":268435456,"CgroupnsMode":"private"';
const create = (hostConfig: string, top = ''): string => `{"Image":"img"${top},"HostConfig":{${PROFILE},"NetworkMode":"none"${hostConfig}}}`;

t.test('every body the controller builds passes and is read as it was sent', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const bodies = controllerBodies(SHARED, { 'dev.capybara.test': 'unit' });
  t.ok(bodies.length > 200, `${bodies.length} bodies: every tier, option and recovery path`);
  const verdicts = checkBodies(bodies.map((b) => ({ route: b.route, body: JSON.stringify(b.body) })), { sharedNetwork: SHARED, volumeDrivers: TEST_VOLUME_DRIVER });
  for (const [i, b] of bodies.entries()) {
    const v = verdicts[i];
    if (v?.allowed !== true) {
      t.fail(`${b.route} ${b.what}: refused (${v?.allowed === false ? v.reason : 'no answer'})`);
      continue;
    }
    t.same(v.view, b.body, `${b.route} ${b.what}`);
  }
});

t.test('settings: HAProxy does not start on a value it would have to guess about', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const rows: Array<{ name: string; volumeDrivers?: string; sharedNetwork?: string; loads: boolean }> = [
    { name: 'no volume plugin', loads: true },
    { name: 'empty list', volumeDrivers: '', loads: true },
    { name: 'one plugin', volumeDrivers: 'quota', loads: true },
    { name: 'two plugins', volumeDrivers: 'quota,nfs-x_1.2', loads: true },
    { name: 'a relative path', volumeDrivers: '../../var/lib/docker/volumes/cap-x/_data/evil', loads: false },
    { name: 'a slash', volumeDrivers: 'vendor/plugin', loads: false },
    { name: 'dot dot inside a name', volumeDrivers: 'a..b', loads: false },
    { name: 'an empty name at the end', volumeDrivers: 'quota,', loads: false },
    { name: 'an empty name in the middle', volumeDrivers: 'quota,,nfs', loads: false },
    { name: 'a blank', volumeDrivers: 'quota, nfs', loads: false },
    { name: 'a name starting with a dot', volumeDrivers: '.hidden', loads: false },
    { name: 'a name of 129 characters', volumeDrivers: 'a'.repeat(129), loads: false },
    { name: 'a shared network not starting with cap', sharedNetwork: 'bridge', loads: false },
  ];
  for (const row of rows) {
    const error = settingsError(row);
    t.equal(error === undefined, row.loads, `${row.name}: ${row.loads ? 'loads' : `refused (${error?.trim().split('\n')[0] ?? ''})`}`);
    if (!row.loads && row.volumeDrivers !== undefined) t.match(error, /SOCKET_PROXY_VOLUME_DRIVERS/, `${row.name}: the error names the setting`);
  }
});

t.test('the parser and the schema, member by member', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const deep = (n: number): string => `${'['.repeat(n)}"x"${']'.repeat(n)}`;
  const env = (n: number): string => `{"Cmd":["true"],"Env":[${Array.from({ length: n }, () => '"A=b"').join(',')}]}`;
  const rows: Array<{ name: string; route: string; body: string | Buffer; verdict: string; settings?: { volumeDrivers: string } }> = [
    // depth, breadth, size of one key, total values
    { name: 'nesting 10 deep', route: 'exec_create', body: `{"Cmd":${deep(9)}}`, verdict: 'bad_value:Cmd' },
    { name: 'nesting 11 deep', route: 'exec_create', body: `{"Cmd":${deep(10)}}`, verdict: 'too_deep:Body' },
    { name: '1,024 items', route: 'exec_create', body: env(1024), verdict: 'ok' },
    { name: '1,025 items', route: 'exec_create', body: env(1025), verdict: 'too_broad:Body' },
    { name: 'a key of 256 bytes', route: 'volume_create', body: `{"Name":"cap-v","Labels":{"${'k'.repeat(256)}":"v"}}`, verdict: 'ok' },
    { name: 'a key of 257 bytes', route: 'volume_create', body: `{"Name":"cap-v","Labels":{"${'k'.repeat(257)}":"v"}}`, verdict: 'too_long:Key' },
    { name: 'more than 8,192 values', route: 'exec_create', body: `{"Cmd":["true"],"Env":[${Array.from({ length: 9 }, () => `[${Array.from({ length: 1000 }, () => '1').join(',')}]`).join(',')}]}`, verdict: 'too_broad:Body' },
    // numbers as Go reads them into int64 and unsigned fields
    { name: 'the image\'s health check turned off', route: 'container_create', body: create('', ',"Healthcheck":{"Test":["NONE"]}'), verdict: 'ok' },
    { name: 'a health check command of the caller\'s', route: 'container_create', body: create('', ',"Healthcheck":{"Test":["CMD","sh","-c","id"]}'), verdict: 'bad_value:Healthcheck.Test' },
    { name: 'NONE twice', route: 'container_create', body: create('', ',"Healthcheck":{"Test":["NONE","NONE"]}'), verdict: 'too_broad:Healthcheck.Test' },
    { name: 'a shell health check', route: 'container_create', body: create('', ',"Healthcheck":{"Test":["CMD-SHELL","id"]}'), verdict: 'bad_value:Healthcheck.Test' },
    { name: 'a health check interval', route: 'container_create', body: create('', ',"Healthcheck":{"Test":["NONE"],"Interval":1}'), verdict: 'forbidden_key:Healthcheck.Interval' },
    { name: 'a health check without Test', route: 'container_create', body: create('', ',"Healthcheck":{}'), verdict: 'bad_value:Healthcheck.Test' },
    { name: 'IPv4 forwarding off', route: 'container_create', body: create(',"Sysctls":{"net.ipv4.ip_forward":"0"}'), verdict: 'ok' },
    { name: 'IPv4 forwarding on', route: 'container_create', body: create(',"Sysctls":{"net.ipv4.ip_forward":"1"}'), verdict: 'bad_value:Sysctls' },
    { name: 'forwarding off, spelled as a number', route: 'container_create', body: create(',"Sysctls":{"net.ipv4.ip_forward":0}'), verdict: 'bad_value:Sysctls' },
    { name: 'IPv6 back on', route: 'container_create', body: create(',"Sysctls":{"net.ipv6.conf.all.disable_ipv6":"0"}'), verdict: 'forbidden_key:Sysctls.net.ipv6.conf.all.disable_ipv6' },
    { name: 'forwarding off and another sysctl', route: 'container_create', body: create(',"Sysctls":{"net.ipv4.ip_forward":"0","net.ipv4.ping_group_range":"0 2147483647"}'), verdict: 'too_broad:Sysctls' },
    { name: 'the forwarding key twice', route: 'container_create', body: create(',"Sysctls":{"net.ipv4.ip_forward":"0","net.ipv4.ip_forward":"1"}'), verdict: 'too_broad:Sysctls' },
    { name: 'the forwarding key in another case', route: 'container_create', body: create(',"Sysctls":{"net.ipv4.IP_forward":"0"}'), verdict: 'forbidden_key:Sysctls.net.ipv4.IP_forward' },
    { name: 'the largest int64 (above the CPU ceiling)', route: 'container_create', body: create(',"NanoCpus":9223372036854775807'), verdict: 'limit_above_ceiling:NanoCpus' },
    { name: 'past int64', route: 'container_create', body: create(',"NanoCpus":9223372036854775808'), verdict: 'bad_value:NanoCpus' },
    { name: 'minus zero (an error for unsigned Go fields)', route: 'container_create', body: create(',"Mounts":[{"Type":"tmpfs","Target":"/t","TmpfsOptions":{"Mode":-0}}]'), verdict: 'bad_value:Mounts.TmpfsOptions.Mode' },
    { name: 'an exponent', route: 'container_create', body: create(',"NanoCpus":1e9'), verdict: 'bad_value:NanoCpus' },
    { name: 'a leading zero', route: 'container_create', body: create(',"NanoCpus":01'), verdict: 'body_not_json' },
    { name: 'a plus sign', route: 'container_create', body: create(',"NanoCpus":+1'), verdict: 'body_not_json' },
    // strings
    { name: 'an escaped slash in a map key (both read "/tmp")', route: 'container_create', body: create(',"Tmpfs":{"\\/tmp":"nosuid,nodev"}'), verdict: 'ok' },
    { name: 'a \\u escape in a key', route: 'container_create', body: create(',"Tmpfs":{"\\u002ftmp":"nosuid,nodev"}'), verdict: 'key_not_ascii' },
    { name: 'an escaped slash in a value', route: 'container_create', body: create(',"Mounts":[{"Type":"tmpfs","Target":"\\/t"}]'), verdict: 'ok' },
    { name: 'a \\u escape in a create value', route: 'container_create', body: create(',"Runtime":"\\u0072unc"'), verdict: 'body_not_ascii' },
    { name: 'an escaped newline in an env value', route: 'container_create', body: create('', ',"Env":["A=b\\nc"]'), verdict: 'bad_value:Env' },
    { name: 'a raw tab in a string', route: 'exec_create', body: '{"Cmd":["a\tb"]}', verdict: 'control_byte' },
    { name: 'a DEL byte', route: 'exec_create', body: '{"Cmd":["a\x7fb"]}', verdict: 'control_byte' },
    { name: 'UTF-8 in an exec command', route: 'exec_create', body: '{"Cmd":["echo","café","日本","😀"]}', verdict: 'ok' },
    { name: 'a surrogate pair escaped in an exec command', route: 'exec_create', body: '{"Cmd":["\\ud83d\\ude00"]}', verdict: 'ok' },
    { name: 'a lone high surrogate', route: 'exec_create', body: '{"Cmd":["\\ud83d"]}', verdict: 'body_not_utf8' },
    { name: 'a lone low surrogate', route: 'exec_create', body: '{"Cmd":["\\ude00"]}', verdict: 'body_not_utf8' },
    { name: 'an overlong encoding', route: 'exec_create', body: Buffer.from('{"Cmd":["\xc0\xaf"]}', 'latin1'), verdict: 'body_not_utf8' },
    { name: 'an encoded surrogate', route: 'exec_create', body: Buffer.from('{"Cmd":["\xed\xa0\x80"]}', 'latin1'), verdict: 'body_not_utf8' },
    { name: 'past U+10FFFF', route: 'exec_create', body: Buffer.from('{"Cmd":["\xf4\x90\x80\x80"]}', 'latin1'), verdict: 'body_not_utf8' },
    { name: 'a cut sequence', route: 'exec_create', body: Buffer.from('{"Cmd":["\xe2\x82"]}', 'latin1'), verdict: 'body_not_utf8' },
    { name: 'UTF-8 in a user name', route: 'exec_create', body: '{"Cmd":["true"],"User":"rööt"}', verdict: 'bad_value:User' },
    { name: 'a non-ASCII key in an exec body', route: 'exec_create', body: '{"Cmd":["true"],"Privilèged":true}', verdict: 'key_not_ascii' },
    // JSON around the object
    { name: 'a byte order mark', route: 'exec_create', body: '\ufeff{"Cmd":["true"]}', verdict: 'body_not_object' },
    { name: 'a form feed as a blank', route: 'exec_create', body: '{"Cmd":\f["true"]}', verdict: 'control_byte' },
    { name: 'a non-breaking space as a blank', route: 'exec_create', body: '{"Cmd":\u00a0["true"]}', verdict: 'body_not_json' },
    { name: 'a second value', route: 'exec_create', body: '{"Cmd":["true"]}{"Privileged":true}', verdict: 'body_not_json' },
    { name: 'blanks around', route: 'exec_create', body: ' \r\n\t{"Cmd":["true"]} \n', verdict: 'ok' },
    { name: 'not an object', route: 'exec_create', body: '["true"]', verdict: 'body_not_object' },
    { name: 'unclosed', route: 'exec_create', body: '{"Cmd":["true"]', verdict: 'body_not_json' },
    { name: 'null for a member', route: 'container_create', body: create(',"Init":null'), verdict: 'bad_value:Init' },
    { name: 'a call with no schema', route: 'container_start', body: '{}', verdict: 'body_not_allowed' },
    // members by letter case, Go's way: two spellings of one field are one field given twice
    { name: 'a field in another case', route: 'container_create', body: create(',"privileged":false'), verdict: 'forbidden_key:privileged' },
    { name: 'a field twice in two cases', route: 'container_create', body: create(',"Init":true,"INIT":false'), verdict: 'duplicate_key:Init' },
    { name: 'a map key in two cases is two keys', route: 'container_create', body: create('', ',"Labels":{"a":"1","A":"2"}'), verdict: 'ok' },
    { name: 'a map key twice', route: 'container_create', body: create('', ',"Labels":{"a":"1","a":"2"}'), verdict: 'duplicate_key:Labels.a' },
    // volume drivers, with two plugins configured
    { name: 'the first configured plugin', route: 'volume_create', body: '{"Name":"cap-v","Driver":"quota","DriverOpts":{"size":"10M"}}', verdict: 'ok', settings: { volumeDrivers: 'quota,nfs' } },
    { name: 'the second configured plugin', route: 'volume_create', body: '{"Name":"cap-v","Driver":"nfs"}', verdict: 'ok', settings: { volumeDrivers: 'quota,nfs' } },
    { name: 'a prefix of a configured plugin', route: 'volume_create', body: '{"Name":"cap-v","Driver":"quot"}', verdict: 'bad_value:Driver', settings: { volumeDrivers: 'quota,nfs' } },
    { name: 'the list itself as a name', route: 'volume_create', body: '{"Name":"cap-v","Driver":"quota,nfs"}', verdict: 'bad_value:Driver', settings: { volumeDrivers: 'quota,nfs' } },
    { name: 'a configured plugin with no list', route: 'volume_create', body: '{"Name":"cap-v","Driver":"quota"}', verdict: 'bad_value:Driver' },
  ];
  for (const row of rows) {
    const [v] = checkBodies([{ route: row.route, body: row.body }], row.settings ?? {});
    t.equal(v?.allowed === true ? 'ok' : v?.reason, row.verdict, row.name);
  }
});

t.test('network shapes: a sandbox subnet, the proxy\'s fixed address, networks by id, the restart policy', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const ID = '0123456789abcdef'.repeat(4);
  const internal = (ipam: string, more = ''): string =>
    `{"Name":"cap-n","CheckDuplicate":true,"Driver":"bridge","Internal":true,"Options":{"com.docker.network.bridge.inhibit_ipv4":"true"}${more},"IPAM":${ipam}}`;
  const config = (entry: string): string => `{"Config":[${entry}]}`;
  const on = (mode: string, more = ''): string => `{"Image":"img","HostConfig":{${PROFILE},"NetworkMode":"${mode}"${more}}}`;
  const connect = (endpoint: string): string => `{"Container":"cap-x-egress","EndpointConfig":${endpoint}}`;
  const rows: Array<{ name: string; route: string; body: string; verdict: string; ids?: string[] }> = [
    // a subnet of its own, only where the host has no route into it (internal, no host address)
    { name: 'a /28 with its lower half as the range', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","IPRange":"10.213.7.16/29"}')), verdict: 'ok' },
    { name: 'with the default driver named', route: 'network_create', body: internal('{"Driver":"default","Config":[{"Subnet":"172.20.0.0/24"}]}'), verdict: 'ok' },
    { name: 'a /29, the smallest', route: 'network_create', body: internal(config('{"Subnet":"192.168.1.8/29"}')), verdict: 'ok' },
    { name: 'a /30', route: 'network_create', body: internal(config('{"Subnet":"10.0.0.4/30"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'a /23', route: 'network_create', body: internal(config('{"Subnet":"10.0.0.0/23"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'a whole private range', route: 'network_create', body: internal(config('{"Subnet":"10.0.0.0/8"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'public addresses', route: 'network_create', body: internal(config('{"Subnet":"8.8.8.0/28"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'the metadata service\'s range', route: 'network_create', body: internal(config('{"Subnet":"169.254.169.240/28"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'just outside 172.16.0.0/12', route: 'network_create', body: internal(config('{"Subnet":"172.32.0.0/28"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'host bits set', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.17/28"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'a leading zero (another address to some parsers)', route: 'network_create', body: internal(config('{"Subnet":"010.213.7.16/28"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'IPv6', route: 'network_create', body: internal(config('{"Subnet":"fd00::/120"}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'a range outside the subnet', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","IPRange":"10.213.7.32/29"}')), verdict: 'bad_value:IPAM.Config.IPRange' },
    { name: 'a range larger than the subnet', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","IPRange":"10.213.7.0/27"}')), verdict: 'bad_value:IPAM.Config.IPRange' },
    { name: 'a gateway at the first address (where dockerd puts it)', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","IPRange":"10.213.7.16/29","Gateway":"10.213.7.17"}')), verdict: 'ok' },
    { name: 'a gateway at another address of the subnet', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","Gateway":"10.213.7.30"}')), verdict: 'bad_value:IPAM.Config.Gateway' },
    { name: 'a gateway outside the subnet', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","Gateway":"10.213.7.33"}')), verdict: 'bad_value:IPAM.Config.Gateway' },
    { name: 'a gateway at the host\'s address', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","Gateway":"127.0.0.1"}')), verdict: 'bad_value:IPAM.Config.Gateway' },
    { name: 'a gateway that is not an address', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","Gateway":"10.213.7.17/28"}')), verdict: 'bad_value:IPAM.Config.Gateway' },
    { name: 'auxiliary addresses', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28","AuxiliaryAddresses":{"a":"10.213.7.18"}}')), verdict: 'forbidden_key:IPAM.Config.AuxiliaryAddresses' },
    { name: 'two subnets', route: 'network_create', body: internal(config('{"Subnet":"10.213.7.16/28"},{"Subnet":"10.213.7.32/28"}')), verdict: 'too_broad:IPAM.Config' },
    { name: 'no subnet', route: 'network_create', body: internal(config('{}')), verdict: 'bad_value:IPAM.Config.Subnet' },
    { name: 'IPAM options', route: 'network_create', body: internal('{"Config":[{"Subnet":"10.213.7.16/28"}],"Options":{"a":"b"}}'), verdict: 'forbidden_key:IPAM.Options' },
    { name: 'a subnet on a bridge the host routes into', route: 'network_create', body: `{"Name":"cap-n","CheckDuplicate":true,"IPAM":${config('{"Subnet":"10.213.7.16/28"}')}}`, verdict: 'network_option_required:Internal' },
    { name: 'a subnet on an internal bridge with a host address', route: 'network_create', body: `{"Name":"cap-n","CheckDuplicate":true,"Internal":true,"IPAM":${config('{"Subnet":"10.213.7.16/28"}')}}`, verdict: 'network_option_required:inhibit_ipv4' },
    { name: 'a subnet with inhibit_ipv4 false', route: 'network_create', body: `{"Name":"cap-n","CheckDuplicate":true,"Internal":true,"Options":{"com.docker.network.bridge.inhibit_ipv4":"false"},"IPAM":${config('{"Subnet":"10.213.7.16/28"}')}}`, verdict: 'network_option_required:inhibit_ipv4' },
    { name: 'a network named like an id', route: 'network_create', body: `{"Name":"${ID}","CheckDuplicate":true}`, verdict: 'network_name_not_allowed' },
    // the egress proxy's fixed address on connect
    { name: 'a fixed private address', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"}}'), verdict: 'ok' },
    { name: 'a public address', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"1.1.1.1"}}'), verdict: 'bad_value:EndpointConfig.IPAMConfig.IPv4Address' },
    { name: 'an address with a leading zero', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.030"}}'), verdict: 'bad_value:EndpointConfig.IPAMConfig.IPv4Address' },
    { name: 'an IPv6 address', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30","IPv6Address":"fd00::1"}}'), verdict: 'forbidden_key:EndpointConfig.IPAMConfig.IPv6Address' },
    { name: 'link-local addresses', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30","LinkLocalIPs":["169.254.1.1"]}}'), verdict: 'forbidden_key:EndpointConfig.IPAMConfig.LinkLocalIPs' },
    // a shard of the shared egress on a sandbox network: the sandbox's egress proxy name as its alias
    { name: 'an egress proxy name as the alias', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-y-egress"]}'), verdict: 'ok' },
    { name: 'the alias before the address', route: 'network_connect', body: connect('{"Aliases":["cap-Y_1-z-egress"],"IPAMConfig":{"IPv4Address":"10.213.7.30"}}'), verdict: 'ok' },
    { name: 'an alias of 64 characters', route: 'network_connect', body: connect(`{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-${'a'.repeat(53)}-egress"]}`), verdict: 'ok' },
    { name: 'an alias of 65 characters', route: 'network_connect', body: connect(`{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-${'a'.repeat(54)}-egress"]}`), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'an alias that is another container\'s name on the network', route: 'network_connect', body: connect('{"Aliases":["cap-y"],"IPAMConfig":{"IPv4Address":"10.213.7.30"}}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'an alias with a "."', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-y.z-egress"]}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'a public host name as the alias', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["pypi.org"]}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'a shard\'s name as the alias', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-egress.0"]}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'an alias with nothing between cap- and -egress', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap--egress"]}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'an alias with a trailing newline', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-y-egress\\n"]}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'two aliases', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":["cap-y-egress","cap-z-egress"]}'), verdict: 'too_broad:EndpointConfig.Aliases' },
    { name: 'no alias in the list', route: 'network_connect', body: connect('{"IPAMConfig":{"IPv4Address":"10.213.7.30"},"Aliases":[]}'), verdict: 'bad_value:EndpointConfig.Aliases' },
    { name: 'an alias without the address', route: 'network_connect', body: connect('{"Aliases":["cap-y-egress"]}'), verdict: 'connect_shape' },
    { name: 'a network id in the endpoint', route: 'network_connect', body: connect(`{"NetworkID":"${ID}","IPAMConfig":{"IPv4Address":"10.213.7.30"}}`), verdict: 'forbidden_key:EndpointConfig.NetworkID' },
    { name: 'an empty endpoint', route: 'network_connect', body: connect('{}'), verdict: 'connect_shape' },
    { name: 'no address', route: 'network_connect', body: connect('{"IPAMConfig":{}}'), verdict: 'connect_shape' },
    // a shard's leg taken off a sandbox network
    { name: 'a forced disconnect', route: 'network_disconnect', body: '{"Container":"cap-egress.0","Force":true}', verdict: 'ok' },
    { name: 'a disconnect, not forced', route: 'network_disconnect', body: '{"Container":"cap-x-egress","Force":false}', verdict: 'ok' },
    { name: 'a disconnect without Force', route: 'network_disconnect', body: '{"Container":"cap-x"}', verdict: 'ok' },
    { name: 'a disconnect without a container', route: 'network_disconnect', body: '{"Force":true}', verdict: 'disconnect_shape' },
    { name: 'a disconnect of a container not named cap-', route: 'network_disconnect', body: '{"Container":"x","Force":true}', verdict: 'bad_value:Container' },
    { name: 'Force as a number', route: 'network_disconnect', body: '{"Container":"cap-x","Force":1}', verdict: 'bad_value:Force' },
    { name: 'an endpoint on a disconnect', route: 'network_disconnect', body: '{"Container":"cap-x","EndpointConfig":{}}', verdict: 'forbidden_key:EndpointConfig' },
    { name: 'Force twice', route: 'network_disconnect', body: '{"Container":"cap-x","Force":false,"force":true}', verdict: 'duplicate_key:Force' },
    { name: 'a non-ASCII byte in a disconnect', route: 'network_disconnect', body: '{"Container":"cap-x\u00e9"}', verdict: 'body_not_ascii' },
    // networks by id: allowed by the schema, named for the proof
    { name: 'a container on a network id', route: 'container_create', body: on(ID), verdict: 'ok', ids: [ID] },
    { name: 'an endpoint on the same id', route: 'container_create', body: `{"Image":"img","HostConfig":{${PROFILE},"NetworkMode":"${ID}"},"NetworkingConfig":{"EndpointsConfig":{"${ID}":{}}}}`, verdict: 'ok', ids: [ID, ID] },
    { name: 'an id in upper case', route: 'container_create', body: on(ID.toUpperCase()), verdict: 'network_mode_not_allowed' },
    { name: 'an id prefix', route: 'container_create', body: on(ID.slice(0, 63)), verdict: 'network_mode_not_allowed' },
    { name: 'a name, no proof', route: 'container_create', body: on('cap-x-net'), verdict: 'ok', ids: [] },
    // the egress proxy comes back when its process dies
    { name: 'restart on failure', route: 'container_create', body: on('none', ',"RestartPolicy":{"Name":"on-failure"}'), verdict: 'ok' },
    { name: 'restart on failure, as inspect gives it back', route: 'container_create', body: on('none', ',"RestartPolicy":{"Name":"on-failure","MaximumRetryCount":0}'), verdict: 'ok' },
    { name: 'a retry count', route: 'container_create', body: on('none', ',"RestartPolicy":{"Name":"on-failure","MaximumRetryCount":3}'), verdict: 'bad_value:RestartPolicy.MaximumRetryCount' },
    { name: 'restart always', route: 'container_create', body: on('none', ',"RestartPolicy":{"Name":"always"}'), verdict: 'bad_value:RestartPolicy.Name' },
    { name: 'restart unless stopped', route: 'container_create', body: on('none', ',"RestartPolicy":{"Name":"unless-stopped"}'), verdict: 'bad_value:RestartPolicy.Name' },
  ];
  const verdicts = checkBodies(rows.map((r) => ({ route: r.route, body: r.body })));
  for (const [i, row] of rows.entries()) {
    const v = verdicts[i];
    t.equal(v?.allowed === true ? 'ok' : v?.reason, row.verdict, row.name);
    if (row.ids !== undefined) t.same(v?.allowed === true ? v.networkIds : undefined, row.ids, `${row.name}: the ids to prove`);
  }
});

t.test('a sandbox\'s name server: exactly one private IPv4 address (its egress proxy\'s), nothing else about DNS', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const rows: Array<{ name: string; hostConfig: string; verdict: string }> = [
    { name: 'the proxy\'s fixed address', hostConfig: ',"Dns":["10.213.7.30"]', verdict: 'ok' },
    { name: 'in 172.16.0.0/12', hostConfig: ',"Dns":["172.31.255.254"]', verdict: 'ok' },
    { name: 'in 192.168.0.0/16', hostConfig: ',"Dns":["192.168.1.14"]', verdict: 'ok' },
    { name: 'two servers (a second one would be asked when the first fails)', hostConfig: ',"Dns":["10.213.7.30","10.213.7.29"]', verdict: 'too_broad:Dns' },
    { name: 'an empty list', hostConfig: ',"Dns":[]', verdict: 'bad_value:Dns' },
    { name: 'a string, not a list', hostConfig: ',"Dns":"10.213.7.30"', verdict: 'bad_value:Dns' },
    { name: 'a public resolver', hostConfig: ',"Dns":["8.8.8.8"]', verdict: 'bad_value:Dns' },
    { name: 'loopback (the host\'s own resolver)', hostConfig: ',"Dns":["127.0.0.53"]', verdict: 'bad_value:Dns' },
    { name: 'the embedded DNS itself', hostConfig: ',"Dns":["127.0.0.11"]', verdict: 'bad_value:Dns' },
    { name: 'link-local (the metadata service)', hostConfig: ',"Dns":["169.254.169.254"]', verdict: 'bad_value:Dns' },
    { name: 'just outside 172.16.0.0/12', hostConfig: ',"Dns":["172.32.0.1"]', verdict: 'bad_value:Dns' },
    { name: 'a leading zero (octal to some parsers)', hostConfig: ',"Dns":["010.213.7.30"]', verdict: 'bad_value:Dns' },
    { name: 'an octet over 255', hostConfig: ',"Dns":["10.213.7.300"]', verdict: 'bad_value:Dns' },
    { name: 'a port', hostConfig: ',"Dns":["10.213.7.30:53"]', verdict: 'bad_value:Dns' },
    { name: 'a trailing blank', hostConfig: ',"Dns":["10.213.7.30 "]', verdict: 'bad_value:Dns' },
    { name: 'IPv6', hostConfig: ',"Dns":["fd00::1"]', verdict: 'bad_value:Dns' },
    { name: 'IPv4-mapped IPv6', hostConfig: ',"Dns":["::ffff:10.213.7.30"]', verdict: 'bad_value:Dns' },
    { name: 'a name', hostConfig: ',"Dns":["resolver.internal"]', verdict: 'bad_value:Dns' },
    { name: 'a number', hostConfig: ',"Dns":[181208862]', verdict: 'bad_value:Dns' },
    { name: 'null', hostConfig: ',"Dns":null', verdict: 'bad_value:Dns' },
    { name: 'another spelling', hostConfig: ',"DNS":["10.213.7.30"]', verdict: 'forbidden_key:DNS' },
    { name: 'twice in two spellings', hostConfig: ',"Dns":["10.213.7.30"],"dns":["8.8.8.8"]', verdict: 'duplicate_key:Dns' },
    { name: 'resolver options (ndots, attempts)', hostConfig: ',"Dns":["10.213.7.30"],"DnsOptions":["ndots:5"]', verdict: 'forbidden_key:DnsOptions' },
    { name: 'a search domain', hostConfig: ',"Dns":["10.213.7.30"],"DnsSearch":["corp.example"]', verdict: 'forbidden_key:DnsSearch' },
    { name: 'extra hosts (names fixed in /etc/hosts)', hostConfig: ',"ExtraHosts":["pypi.org:10.213.7.30"]', verdict: 'forbidden_key:ExtraHosts' },
  ];
  const verdicts = checkBodies(rows.map((r) => ({ route: 'container_create', body: create(r.hostConfig) })));
  for (const [i, row] of rows.entries()) {
    const v = verdicts[i];
    t.equal(v?.allowed === true ? 'ok' : v?.reason, row.verdict, row.name);
  }
});
