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
    { name: 'the largest int64', route: 'container_create', body: create(',"NanoCpus":9223372036854775807'), verdict: 'ok' },
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
