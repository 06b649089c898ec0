/**
 * The judge of the socket proxy's image proof (haproxy/image-proof.lua), run directly under a
 * standalone lua5.4 on answers dockerd could give to an image inspect, and the body check's part:
 * which container creates name an image to prove. A create with a volume goes on only when its
 * image declares no volume of its own (dockerd would make those whatever the body says, and runc
 * makes their mount points by path through the body's volumes); every answer that is not what
 * dockerd sends refuses. The same proof against the real HAProxy and engine, with the race it
 * prevents, is in mount-symlink-race.test.ts.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { needUnmet } from '../support/needs.js';
import { HAPROXY_DIR, luaMissing } from './lua-checker.js';

function lua(code: string, input = ''): string {
  const run = spawnSync('lua5.4', ['-e', `package.path = ${JSON.stringify(`${HAPROXY_DIR}/?.lua;`)} .. package.path\n${code}`], { input });
  if (run.status !== 0) throw new Error(run.stderr.toString('utf8'));
  return run.stdout.toString('utf8');
}

t.test('the judge: an image that declares no volume passes, anything else refuses', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const rows: Array<[number, string, string]> = [
    [200, '{"Id":"sha256:ab","Config":{"Image":"x","Volumes":null}}', 'ok'],
    [200, '{"Id":"sha256:ab","Config":{"Volumes":{}}}', 'ok'],
    [200, '{"Id":"sha256:ab","Config":{}}', 'ok'],
    [200, '{"Id":"sha256:ab","Config":null}', 'ok'],
    [200, '{"Id":"sha256:ab","Config":{"Volumes":{"/w/p/q":{}}}}', 'mount_image_volume:/w/p/q'],
    [200, '{"Id":"sha256:ab","Config":{"Volumes":{"/w/p/q":{},"/data":{}}}}', 'mount_image_volume:/data'],
    [200, '{"Config":{"Volumes":{"/a b":{}}}}', 'mount_image_volume:/a?b'],
    [200, '{"Config":{"Volumes":[]}}', 'image_proof_failed'],
    [200, '{"Config":{"Volumes":{}},"Config":{"Volumes":{"/x":{}}}}', 'image_proof_failed'],
    [200, '{"Config":"x"}', 'image_proof_failed'],
    [200, 'not json', 'image_proof_failed'],
    [404, '{"message":"No such image: x"}', 'image_not_found'],
    [500, '{"message":"boom"}', 'image_proof_failed'],
  ];
  const out = lua(
    `local p = require('image-proof')
     for line in io.lines() do
       local status, body = line:match('^(%d+) (.*)$')
       io.write(p.judge(tonumber(status), body), '\\n')
     end`,
    rows.map(([status, body]) => `${status} ${body}`).join('\n') + '\n',
  ).trim().split('\n');
  rows.forEach(([status, body, verdict], i) => t.equal(out[i], verdict, `${status} ${body}`));
  t.equal(lua(`io.write(require('image-proof').path('reg.example.com:5000/team/x:1'))`), '/images/reg.example.com:5000/team/x:1/json', 'asked by its listed name');
});

t.test('the body check names the image of a create with a volume, and only then', async (t) => {
  const missing = luaMissing();
  if (missing !== undefined) return needUnmet(t, missing);
  const create = (mounts: unknown[]) => JSON.stringify({
    Image: 'capybara-sandbox:latest',
    HostConfig: {
      NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true, PidsLimit: 64,
      Memory: 268435456, CgroupnsMode: 'private', LogConfig: { Type: 'json-file', Config: { 'max-size': '10m' } }, Mounts: mounts,
    },
  });
  const check = (body: string) => lua(
    `local settings = require('proxy-settings').from_env(function(k) return ({ SOCKET_PROXY_SHARED_NETWORK = 'capybara-sandbox', DOCKER_SOCKET = '/var/run/docker.sock', SOCKET_PROXY_IMAGES = 'capybara-sandbox:latest' })[k] end)
     local reason, ids, image = require('body-check').check('container_create', io.read('a'), settings)
     io.write(tostring(reason), ' ', tostring(image))`,
    body,
  );
  t.equal(check(create([{ Type: 'volume', Source: 'cap-w', Target: '/workspace', VolumeOptions: { NoCopy: true } }])), 'nil capybara-sandbox:latest', 'a volume: its image is to be proven');
  t.equal(check(create([{ Type: 'tmpfs', Target: '/tmp' }])), 'nil nil', 'a tmpfs alone: nothing to prove');
  t.equal(check(create([])), 'nil nil', 'no mount: nothing to prove');
});
