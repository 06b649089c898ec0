/**
 * A stream given as stdin survives a retry after `sandbox_full`: the first attempt's wrapper
 * exits without starting the command, and nothing of the caller's stream may have been read (a
 * Node Readable is destroyed when an iteration of it stops). The real startExec runs against an
 * engine whose hijacked connection is a Duplex that records what it was written.
 */
import t from 'tap';
import { Duplex, PassThrough, Readable } from 'node:stream';
import type { CommandRunner } from '../../../controller/exec/commands.js';
import { startExec } from '../../../controller/docker/engine-exec.js';
import type { EngineCaller } from '../../../controller/docker/engine-call.js';
import { EXEC_MARK_VAR, KILL_OK_MARKER, MAX_INLINE_PAYLOAD, STARTED_BYTE, SURVIVORS_MARKER } from '../../../controller/exec/exec-script.js';
import { standInRunner } from '../../support/stand-in-runner.js';

function frame(type: number, payload: string | Buffer): Buffer {
  const body = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  const head = Buffer.alloc(8);
  head[0] = type;
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, body]);
}

interface Fake {
  readonly runner: CommandRunner;
  /** What each command attempt's stdin received, in order. */
  readonly received: Buffer[][];
}

/** The first `full` command attempts find the sandbox full (exit 190, stdin never read); then the command echoes its stdin. */
function fake(full: number): Fake {
  const received: Buffer[][] = [];
  const exits = new Map<string, number>();
  let last: { id: string; cmd: string[]; env?: string[] } | undefined;
  let attempts = 0;
  let next = 0;
  const caller = {
    async call(_what: string, method: string, path: string, opts: { body?: { Cmd: string[]; Env?: string[] } }): Promise<unknown> {
      if (method === 'POST' && path.endsWith('/exec')) {
        next += 1;
        const id = next.toString(16).padStart(64, '0');
        last = { id, cmd: opts.body?.Cmd ?? [], ...(opts.body?.Env === undefined ? {} : { env: opts.body.Env }) };
        return { Id: id };
      }
      if (path.endsWith('/start')) {
        const { id, cmd, env } = last!;
        const got: Buffer[] = [];
        const d = new Duplex({ read() {}, write(chunk: Buffer, _e, cb) { got.push(chunk); cb(); } });
        if (env?.some((e) => e.startsWith(`${EXEC_MARK_VAR}=`)) !== true) {
          exits.set(id, 0);
          setImmediate(() => { d.push(frame(1, cmd[3] === SURVIVORS_MARKER ? `${SURVIVORS_MARKER} 0\n` : `${KILL_OK_MARKER}\n`)); d.push(null); });
          return d;
        }
        received.push(got);
        attempts += 1;
        if (attempts <= full) {
          exits.set(id, 190);
          setTimeout(() => { d.push(frame(2, 'capybara-sandbox-full 1020/1024\n')); d.push(null); }, 50);
          return d;
        }
        exits.set(id, 0);
        d.push(frame(2, Buffer.from([STARTED_BYTE])));
        d.on('finish', () => { d.push(frame(1, Buffer.concat(got))); d.push(null); });
        return d;
      }
      if (path.endsWith('/json')) return { Running: false, ExitCode: exits.get(path.split('/')[2] ?? '') };
      throw new Error(`unexpected ${method} ${path}`);
    },
    async optional<T>(p: Promise<T>): Promise<T> { return p; },
  } as unknown as EngineCaller;
  const runner = standInRunner((container, request) => startExec(caller, container, request), { execTimeoutMs: 600_000, outputBytes: 16 * 1024 * 1024 });
  return { runner, received };
}

const sources: { name: string; make: () => Readable }[] = [
  { name: 'a Readable with all its chunks ready', make: () => Readable.from([Buffer.from('line1\n'), Buffer.from('line2\n'), Buffer.from('line3\n')]) },
  {
    name: 'a PassThrough written over time',
    make: () => {
      const s = new PassThrough();
      setTimeout(() => s.write('line1\n'), 20);
      setTimeout(() => s.write('line2\n'), 120);
      setTimeout(() => s.end('line3\n'), 200);
      return s;
    },
  },
];

for (const source of sources) {
  t.test(`stdin stream survives a sandbox_full retry: ${source.name}`, async (t) => {
    const { runner, received } = fake(1);
    const out: Buffer[] = [];
    const r = await runner.exec('cap-x', 'cat', { stdin: source.make(), onOutput: (_s: string, c: Uint8Array) => void out.push(Buffer.from(c)) });
    t.equal(r.exitCode, 0);
    t.equal(Buffer.concat(out).toString(), 'line1\nline2\nline3\n', 'the retry got the whole stream');
    t.equal(received.length, 2, 'two attempts');
    t.equal(Buffer.concat(received[0] ?? []).length, 0, 'the attempt that never began was written nothing');
  });
}

t.test('a staged command goes first on every attempt; the caller stream only to the one that began', async (t) => {
  const { runner, received } = fake(1);
  const big = `echo ${'x'.repeat(MAX_INLINE_PAYLOAD)}`;
  const out: Buffer[] = [];
  const r = await runner.exec('cap-x', big, { stdin: Readable.from([Buffer.from('data\n')]), onOutput: (_s: string, c: Uint8Array) => void out.push(Buffer.from(c)) });
  t.equal(r.exitCode, 0);
  const first = Buffer.concat(received[0] ?? []).toString();
  const second = Buffer.concat(received[1] ?? []).toString();
  t.ok(first.startsWith(big), 'the first attempt got the staged command');
  t.notOk(first.includes('data\n'), 'and none of the caller stream');
  t.ok(second.startsWith(big) && second.endsWith('data\n'), 'the second got the command, then the caller stream');
  t.ok(Buffer.concat(out).toString().endsWith('data\n'));
});

t.test('still full on the retry: sandbox_full, the stream left unread', async (t) => {
  const { runner, received } = fake(2);
  const stdin = Readable.from([Buffer.from('keep\n')]);
  await t.rejects(runner.exec('cap-x', 'cat', { stdin }), { code: 'sandbox_full' });
  t.equal(received.length, 2);
  t.equal(Buffer.concat(received.flat()).length, 0, 'no attempt was written the caller stream');
  t.notOk(stdin.destroyed, 'the caller stream is not destroyed');
});
