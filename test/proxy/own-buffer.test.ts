/**
 * A tunnel's upstream reads into one buffer of its own (proxy/upstream/own-buffer.ts), reused for
 * every read. The buffer is read into again only once what the last read passed on is written,
 * so a download reaches a client that reads in fits and starts byte for byte; what the upstream
 * sent before the relay took its reads over comes first, in order; and a socket nobody reads
 * holds its bytes instead of dropping them.
 */
import { createHash } from 'node:crypto';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { TUNNEL_READ_BYTES } from '../../proxy/budget/index.js';
import { connectWithOwnBuffer, readInto, type DialPurpose } from '../../proxy/upstream/index.js';
import { listen } from '../support/loopback.js';
import { prng } from '../support/prng.js';
import { rawRequest } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

const MIB = 1024 * 1024;

/** `size` bytes from a seeded generator: a buffer reused too early shows as a wrong digest. */
function noise(size: number, seed: number): Buffer {
  const next = prng(seed);
  const out = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i += 4) out.writeUInt32LE(Math.floor(next() * 2 ** 32) >>> 0, i);
  return out;
}

const digest = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

/** A server that writes `payload` to each connection in pieces of random sizes, then ends. */
async function sender(payload: Buffer): Promise<{ port: number; close(): void }> {
  const server = net.createServer((socket) => {
    socket.on('error', () => socket.destroy());
    let at = 0;
    const pump = (): void => {
      while (at < payload.length) {
        const size = 1 + Math.floor(Math.random() * 200_000);
        const piece = payload.subarray(at, at + size);
        at += piece.length;
        if (!socket.write(piece)) return void socket.once('drain', pump);
      }
      socket.end();
    };
    pump();
  });
  const port = await listen(server);
  return { port, close: () => server.close() };
}

t.test('a download reaches a client that pauses byte for byte, through one reused buffer', async (t) => {
  const payload = noise(24 * MIB, 7);
  const upstream = await sender(payload);
  t.teardown(() => upstream.close());
  const purposes: DialPurpose[] = [];
  const proxy = await startTestProxy({
    policy: { allowHosts: [{ host: 'bulk.test', tunnel: 'opaque' }], connectPorts: [upstream.port], testHosts: { 'bulk.test': '127.0.0.1' } },
    connect: (address, port, purpose) => {
      purposes.push(purpose);
      return connectWithOwnBuffer(address, port);
    },
  });
  t.teardown(() => proxy.close());
  const res = await rawRequest(proxy.port, `CONNECT bulk.test:${upstream.port} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.equal(res.status, 200);
  const client = res.socket;
  // The upstream speaks first: its first bytes may have come with the proxy's answer.
  const chunks: Buffer[] = [Buffer.from(res.body, 'latin1')];
  let received = res.body.length;
  let nextStop = 0;
  // Stops reading every ~1 MiB for a moment: the proxy's writes to it go pending, and its
  // upstream must pause on each until it is written.
  client.on('data', (chunk: Buffer) => {
    chunks.push(chunk);
    received += chunk.length;
    if (received >= nextStop) {
      nextStop = received + MIB;
      client.pause();
      setTimeout(() => client.resume(), 5);
    }
  });
  client.resume();
  await new Promise<void>((resolve, reject) => {
    client.once('end', () => resolve());
    client.once('error', reject);
  });
  client.destroy();
  t.same(purposes, ['tunnel'], 'the tunnel dialled its upstream as a tunnel');
  t.equal(received, payload.length, 'every byte arrived');
  t.equal(digest(Buffer.concat(chunks)), digest(payload), 'in order and unchanged');
});

t.test('bytes read before the relay takes over come first; a socket nobody reads holds them', async (t) => {
  const payload = noise(4 * MIB, 11);
  const upstream = await sender(payload);
  t.teardown(() => upstream.close());
  const socket = connectWithOwnBuffer('127.0.0.1', upstream.port);
  t.teardown(() => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  // Nobody reads for a while: the socket must stop at its high-water mark, not read on and drop.
  // The while counts from the first bytes in: a stall of this process (the sender's too) after the
  // connect could end a fixed wait before anything arrived.
  await settle(() => socket.readableLength > 0, 'the first bytes');
  await sleep(200);
  const waiting = socket.readableLength;
  t.ok(waiting > 0 && waiting <= socket.readableHighWaterMark + TUNNEL_READ_BYTES, `no more than its high-water mark and one read wait: ${waiting} bytes`);
  const early = socket.read() as Buffer | null;
  t.equal(early?.length, waiting, 'what waits is read whole');
  const pieces: Buffer[] = [early ?? Buffer.alloc(0)];
  await sleep(50);
  // The relay takes over: what is buffered comes first, then each read, copied out while it is valid.
  const taken = readInto(socket, (view) => {
    pieces.push(Buffer.from(view));
    return true;
  });
  t.ok(taken, 'a socket with a buffer of its own is taken over');
  socket.resume();
  await new Promise<void>((resolve) => socket.once('end', () => resolve()));
  t.equal(digest(Buffer.concat(pieces)), digest(payload), 'every byte, in order');
  const plain = net.connect({ host: '127.0.0.1', port: upstream.port });
  t.teardown(() => plain.destroy());
  t.notOk(readInto(plain, () => true), 'a plain socket is left to its data events');
});
