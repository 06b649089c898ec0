/**
 * The CLI's stdout writer: a full pipe hands back one wait, shared by every write until the drain.
 * Before, each write past the high-water mark added its own 'drain' listener: `logs` into a
 * paused pager added one per line of a chunk (hundreds), and Node printed a listener-leak warning.
 */
import { Writable } from 'node:stream';
import t from 'tap';
import { drainingWriter } from '../../../controller/operator/drain-wait.js';

t.test('writes into a full stream share one wait and one listener', async (t) => {
  let release: () => void = () => undefined;
  const out = new Writable({
    highWaterMark: 64,
    write(_chunk, _encoding, done) {
      release = done;
    },
  });
  const write = drainingWriter(out);
  const waits = Array.from({ length: 50 }, (_, i) => write(`line ${i} of a log\n`));
  t.equal(waits[0], undefined, 'the first write fits');
  t.ok(waits[49] instanceof Promise, 'a full stream asks to wait');
  t.equal(out.listenerCount('drain'), 1, 'one drain listener, however many lines were written');
  t.equal(new Set(waits.filter((w) => w !== undefined)).size, 1, 'one wait for them all');
  // Each write completes as soon as the sink takes it: the drain comes once all are taken.
  const taken = (async () => {
    while (out.writableLength > 0) {
      release();
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  await waits[49];
  await taken;
  t.equal(out.listenerCount('drain'), 0, 'the listener goes with the drain');
});
