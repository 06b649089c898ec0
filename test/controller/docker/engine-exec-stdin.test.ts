/**
 * An exec's stdin given as a stream (engine-exec.ts pipeStdin), over a stand-in for the hijacked
 * connection: chunks are written in order and the end half-closes the command's stdin; a source
 * that fails is an end too; and a source that never ends does not keep the exec from finishing.
 */
import t from 'tap';
import { Duplex } from 'node:stream';
import { startExec } from '../../../controller/docker/engine-exec.js';
import type { EngineCaller } from '../../../controller/docker/engine-call.js';

interface Connection {
  readonly engine: EngineCaller;
  readonly written: Buffer[];
  /** Resolves when the stdin side was half-closed. */
  readonly halfClosed: Promise<void>;
  /** Ends the output side, as the engine does when the command exits. */
  endOutput(): void;
}

function connection(): Connection {
  const written: Buffer[] = [];
  let closeIn: () => void = () => undefined;
  const halfClosed = new Promise<void>((resolve) => (closeIn = resolve));
  const duplex = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, done) {
      written.push(chunk);
      done();
    },
    final(done) {
      closeIn();
      done();
    },
  });
  const engine = {
    call: async (_what: string, _method: string, path: string) => {
      if (path.endsWith('/exec')) return { Id: 'a'.repeat(64) };
      if (path.endsWith('/start')) return duplex;
      return { Running: false, ExitCode: 0 };
    },
    optional: async <T>(p: Promise<T>) => p,
  } as unknown as EngineCaller;
  return { engine, written, halfClosed, endOutput: () => duplex.push(null) };
}

const request = (stdin: AsyncIterable<Uint8Array>) => ({ cmd: ['cat'], user: '1000:1000', stdin, onOutput: () => undefined });

t.test('chunks go in order, and the end of the source half-closes stdin', async (t) => {
  const c = connection();
  async function* source(): AsyncGenerator<Uint8Array> {
    yield Buffer.from('a');
    await new Promise((resolve) => setTimeout(resolve, 10));
    yield Buffer.from('b');
  }
  const run = await startExec(c.engine, 'cap-x', request(source()));
  await c.halfClosed;
  t.equal(Buffer.concat(c.written).toString(), 'ab');
  c.endOutput();
  t.equal(await run.finished, 0);
});

t.test('a source that fails is an end of the command\'s stdin', async (t) => {
  const c = connection();
  async function* source(): AsyncGenerator<Uint8Array> {
    yield Buffer.from('x');
    throw new Error('EIO');
  }
  await startExec(c.engine, 'cap-x', request(source()));
  await c.halfClosed;
  t.equal(Buffer.concat(c.written).toString(), 'x');
  c.endOutput();
});

t.test('a source that never ends: the exec finishes when its output ends', async (t) => {
  const c = connection();
  let reads = 0;
  const never: AsyncIterable<Uint8Array> = {
    [Symbol.asyncIterator]: () => ({
      next: () => {
        reads += 1;
        return reads === 1 ? Promise.resolve({ done: false, value: Buffer.from('typed') }) : new Promise(() => undefined);
      },
    }),
  };
  const run = await startExec(c.engine, 'cap-x', request(never));
  await new Promise((resolve) => setTimeout(resolve, 20));
  c.endOutput();
  t.equal(await run.finished, 0, 'finished, with the second read still pending');
  t.equal(Buffer.concat(c.written).toString(), 'typed');
  t.equal(reads, 2, 'nothing read after the output ended');
});
