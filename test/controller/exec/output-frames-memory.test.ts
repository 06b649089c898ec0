/**
 * What a command's output costs the controller's memory, by the frames it comes in. dockerd
 * writes one frame of its exec stream per read of the command's pipe, so a command that writes a
 * byte at a time, a moment apart, gets a frame per byte (on the real engine, `os.write(1, b'x')`
 * then `time.sleep(0.00001)`, 200,000 times: 177,465 frames). Each frame reached OutputCapture as
 * a Buffer view of its own and was kept as one: 200 KB of output held 35 MB of the controller's
 * heap (about 175 bytes a frame), so the default 1 MiB cap held some 180 MB per stream, and a
 * cap at the 16 MiB ceiling about 3 GB, past V8's heap limit (review finding). The held bytes
 * must cost about what they are, however they were framed.
 */
import t from 'tap';
import v8 from 'node:v8';
import vm from 'node:vm';
import { OutputCapture } from '../../../controller/exec/output-capture.js';
import { StreamDemux } from '../../../controller/docker/stream-demux.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const FRAMES = 200_000;
/** Bytes of network chunk the exec stream arrives in (a socket read). */
const CHUNK_BYTES = 64 * 1024;

/** The exec stream of FRAMES one-byte stdout frames, as socket reads of CHUNK_BYTES. */
function oneByteFrames(): Buffer[] {
  const frame = Buffer.from([1, 0, 0, 0, 0, 0, 0, 1, 0x78]);
  const all = Buffer.concat(Array.from({ length: FRAMES }, () => frame));
  const chunks: Buffer[] = [];
  // Copies: each read is a buffer of its own, as a socket gives them.
  for (let at = 0; at < all.length; at += CHUNK_BYTES) chunks.push(Buffer.from(all.subarray(at, at + CHUNK_BYTES)));
  return chunks;
}

function heldBytes(): number {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

t.test('output held by OutputCapture costs about its bytes, however small its frames', async (t) => {
  let chunks: Buffer[] | undefined = oneByteFrames();
  const before = heldBytes();
  const capture = new OutputCapture(1024 * 1024);
  const demux = new StreamDemux((_stream, payload) => capture.push(payload));
  for (const chunk of chunks) demux.push(chunk);
  chunks = undefined;
  const held = heldBytes() - before;
  t.equal(capture.bytesRaw().length, FRAMES, 'every byte kept');
  t.equal(capture.text(), 'x'.repeat(FRAMES));
  // 200 KB of output. The views cost 20 to 35 MB; what is left after a full collection moves by
  // whole heap pages (up to 6.4 MB once in CI, in output-wait-memory), so the bound sits between.
  t.ok(held < 12 * 1024 * 1024, `the capture holds ${(held / 1e6).toFixed(1)} MB for ${FRAMES / 1000} KB of output`);
});
