/**
 * The dockerode layer against a fake engine on a unix socket in a temp directory (no Docker, no
 * network): deadlines, error mapping, the exact request shapes, and exec streams with stdin.
 */
import t, { type Test } from 'tap';
import http from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Socket } from 'node:net';
import { DockerEngine, engineStatus } from '../../../controller/docker/engine.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

interface Seen { method: string; url: string; body: string; headers: http.IncomingHttpHeaders }

function frame(type: number, text: string | Buffer): Buffer {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

const EXEC_ID = 'a'.repeat(64);
const CONTAINER_ID = 'c'.repeat(64);

async function fakeEngine(t: Test): Promise<{ endpoint: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', body, headers: req.headers });
      const url = req.url ?? '';
      if (url.startsWith('/containers/cap-slow/json')) return; // never answers
      if (url.startsWith('/containers/cap-missing/json')) return json(res, 404, { message: 'No such container: cap-missing' });
      if (url.startsWith('/containers/cap-denied/json')) return void res.writeHead(403).end('denied by the Docker socket proxy: route_not_allowed\n');
      if (url.startsWith('/containers/cap-x/json')) return json(res, 200, { State: { Status: 'paused', Running: true, Paused: true }, Config: { Labels: { a: 'b' }, Image: 'img' }, HostConfig: { NetworkMode: 'none' } });
      if (url.startsWith('/containers/create?name=cap-x')) return json(res, 201, { Id: CONTAINER_ID, Warnings: [] });
      if (url === '/containers/cap-x/exec') return json(res, 201, { Id: EXEC_ID });
      if (url === `/exec/${EXEC_ID}/start` && req.headers.upgrade === undefined) {
        res.writeHead(200, { 'Content-Type': 'application/vnd.docker.raw-stream' });
        res.write(frame(1, 'out'));
        res.end(frame(2, 'err'));
        return;
      }
      if (url === `/exec/${EXEC_ID}/json`) return json(res, 200, { Running: false, ExitCode: 3 });
      json(res, 200, {});
    });
  });
  // Exec start with stdin: a hijacked connection that echoes stdin back as stdout frames.
  server.on('upgrade', (req, socket: Socket) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', body: '', headers: req.headers });
    socket.write('HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n');
    let total = 0;
    socket.on('data', (chunk: Buffer) => { total += chunk.length; });
    socket.on('end', () => socket.end(frame(1, `got ${total}`)));
  });
  const path = join(mkdtempSync(join(tmpdir(), 'capybara-engine-')), 'docker.sock');
  await new Promise<void>((resolve) => server.listen(path, resolve));
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  return { endpoint: `unix://${path}`, seen };
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
}

async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (err) {
    return isSandboxError(err) ? err.code : `not a SandboxError: ${String(err)}`;
  }
}

t.test('deadlines and error mapping', async (t) => {
  const { endpoint } = await fakeEngine(t);
  const engine = new DockerEngine({ endpoint, callTimeoutMs: 300 });
  const started = Date.now();
  t.equal(await codeOf(engine.inspectContainer('cap-slow')), 'engine_timeout');
  t.ok(Date.now() - started < 5000, 'a call that hangs ends at its deadline (300 ms), not at the 30 s default');
  t.equal(await engine.inspectContainer('cap-missing'), undefined, '404 on inspect is "absent"');
  t.equal(await codeOf(engine.inspectContainer('cap-denied')), 'engine_refused');
  const gone = new DockerEngine({ endpoint: 'unix:///nonexistent/capybara.sock', callTimeoutMs: 300 });
  t.equal(await codeOf(gone.ping()), 'engine_unavailable');
  t.equal(engineStatus(new Error('x')), undefined);
});

t.test('request shapes: query and body exactly as meant', async (t) => {
  const { endpoint, seen } = await fakeEngine(t);
  const engine = new DockerEngine({ endpoint });
  t.equal(await engine.createContainer('cap-x', { Image: 'img', HostConfig: { NetworkMode: 'none' } }), CONTAINER_ID, 'the new container\'s id, as Docker says it');
  await engine.stopContainer('cap-x', 2);
  await engine.startContainer('cap-x');
  await engine.removeContainer('cap-x');
  await engine.connectNetwork('cap-net', 'cap-x-egress');
  const [create, stop, start, remove, connect] = seen;
  t.equal(create?.url, '/containers/create?name=cap-x');
  t.equal(create?.body, '{"Image":"img","HostConfig":{"NetworkMode":"none"}}');
  t.equal(create?.headers['content-type'], 'application/json');
  t.equal(stop?.url, '/containers/cap-x/stop?t=2');
  t.equal(stop?.body, '', 'lifecycle calls carry no body');
  t.equal(start?.url, '/containers/cap-x/start');
  t.equal(start?.body, '');
  t.equal(remove?.url, '/containers/cap-x?force=true&v=true');
  t.equal(connect?.body, '{"Container":"cap-x-egress"}');
  for (const request of seen) t.equal(request.headers['transfer-encoding'], undefined, `${request.url} not chunked`);
  t.same((await engine.inspectContainer('cap-x'))?.paused, true);
});

t.test('an image reference goes into an engine path only as one', async (t) => {
  const { endpoint, seen } = await fakeEngine(t);
  const engine = new DockerEngine({ endpoint });
  t.equal(await engine.imageExists('registry.example.com:5000/team/img:1'), true);
  t.equal(seen.at(-1)?.url, '/images/registry.example.com:5000/team/img:1/json');
  const before = seen.length;
  // `x/get?` would be the export route (the image as a tarball), the rest other requests.
  for (const image of ['x/get?', 'x#', 'a/../../containers/json', 'a b', 'x%2fget', '/x', '']) {
    t.equal(await codeOf(engine.imageExists(image)), 'invalid_spec', JSON.stringify(image));
  }
  t.equal(seen.length, before, 'none was sent');
});

t.test('exec streams output and stdin, then reads the exit code', async (t) => {
  const { endpoint, seen } = await fakeEngine(t);
  const engine = new DockerEngine({ endpoint });
  const got = { stdout: '', stderr: '' };
  const run = await engine.startExec('cap-x', { cmd: ['true'], user: '1000:1000', onOutput: (s, c) => (got[s] += c.toString()) });
  t.equal(await run.finished, 3);
  t.same(got, { stdout: 'out', stderr: 'err' });
  const create = seen.find((r) => r.url === '/containers/cap-x/exec');
  t.same(JSON.parse(create?.body ?? '{}'), { AttachStdin: false, AttachStdout: true, AttachStderr: true, Tty: false, User: '1000:1000', Cmd: ['true'] });

  const echoed = { stdout: '', stderr: '' };
  const data = new Uint8Array(3 * 1024 * 1024).fill(7);
  const withStdin = await engine.startExec('cap-x', { cmd: ['cat'], user: '1000:1000', stdin: data, onOutput: (s, c) => (echoed[s] += c.toString()) });
  t.equal(await withStdin.finished, 3);
  t.equal(echoed.stdout, `got ${data.length}`, 'stdin streamed over the upgraded connection and half-closed');
  const upgrade = seen.find((r) => r.headers.upgrade !== undefined);
  t.equal(upgrade?.headers.upgrade, 'tcp');
  t.equal(upgrade?.headers['content-length'], String(Buffer.byteLength('{"Detach":false,"Tty":false}')));
});
