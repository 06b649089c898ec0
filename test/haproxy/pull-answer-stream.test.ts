/**
 * A pull's 200 stream through the real HAProxy and its pull-answer filter, from a stand-in for
 * dockerd (a unix socket served here; the socket proxy's DOCKER_SOCKET points to it), so that the
 * stream's lines are exactly these:
 * - the answer ends when dockerd's does: dockerd streams a pull chunked, and a filter that forwards
 *   only the data of the message and not its end kept every pull answered 200 open until the
 *   client's timeout (an hour), a stream slot with it;
 * - a line that is not progress is replaced by the fixed sentence, a progress line passes.
 */
import t from 'tap';
import http from 'node:http';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dockerTest, startSocketProxy, SOCKET_PROXY_IMAGE } from '../support/docker.js';
import { fileNeeds } from '../support/needs.js';
import { send } from './raw-http.js';
import { IMAGES } from '../../common/index.js';

await fileNeeds(t, 'engine');

const SECRET = 'registry-said-this-secret';

t.test('a pull streamed 200: the answer ends, and only progress lines pass', async (t) => {
  const env = await dockerTest(t, [SOCKET_PROXY_IMAGE]);
  if (!env) return;
  const dir = mkdtempSync(join(tmpdir(), `cap-${env.runId}-dockerd-`));
  chmodSync(dir, 0o755);
  const fake = http.createServer((req, res) => {
    if (req.url === '/_ping') {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Api-Version': '1.41' }).end('OK');
      return;
    }
    // No Content-Length: Node streams it chunked, as dockerd does.
    res.writeHead(200, { 'Content-Type': 'application/json', 'Api-Version': '1.41' });
    res.write('{"status":"Pulling from library/x","id":"latest"}\r\n');
    res.write(`{"errorDetail":{"message":"${SECRET}"},"error":"${SECRET}"}\r\n`);
    res.end();
  });
  const socketPath = join(dir, 'docker.sock');
  await new Promise<void>((resolve) => fake.listen(socketPath, resolve));
  t.teardown(() => new Promise<void>((resolve) => fake.close(() => { rmSync(dir, { recursive: true, force: true }); resolve(); })));

  const proxy = await startSocketProxy(t, env, { env: { DOCKER_SOCKET: '/run/fake-dockerd/docker.sock' }, binds: [`${dir}:/run/fake-dockerd`] });
  const started = Date.now();
  const res = await send(proxy.socketPath, {
    method: 'POST', path: `/v1.41/images/create?fromImage=${encodeURIComponent(IMAGES.sandbox)}`, headers: { Connection: 'close' }, body: null,
  }, 10_000).catch((err: unknown) => err as Error);
  if (res instanceof Error) {
    t.fail(`the pull's answer never ended: ${res.message}`);
    return;
  }
  t.equal(res.status, 200, 'dockerd\'s status');
  t.ok(Date.now() - started < 5_000, 'answered as soon as dockerd ended its answer');
  const text = res.body.toString('utf8');
  t.match(text, '"status":"Pulling from library/x"', 'a progress line passes');
  t.notMatch(text, SECRET, 'the registry\'s words do not');
  t.match(text, 'does not pass on what the registry answered', 'the fixed sentence instead');
});
