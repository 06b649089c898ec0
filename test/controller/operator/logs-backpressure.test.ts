/**
 * `logs` into a slow reader (`logs -f | less`, paused): a write that asks to wait pauses the
 * engine's log stream until it settles, so what the proxy logs meanwhile waits in the engine's
 * connection, never in the CLI's memory (before, every line was queued on stdout as it came).
 */
import { PassThrough } from 'node:stream';
import t from 'tap';
import { readContainerLogs } from '../../../controller/docker/engine-logs.js';
import type { EngineCaller } from '../../../controller/docker/engine-call.js';
import { DecisionPrinter } from '../../../controller/operator/logs-command.js';

/** One frame of Docker's multiplexed stream (stdout). */
function frame(text: string): Buffer {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header.writeUInt8(1, 0);
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

const record = (n: number): string => `${JSON.stringify({ event: 'decision', decision: 'deny', host: `h${n}.example`, reason: 'host_not_allowed' })}\n`;
const tick = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 20));

t.test('a write that asks to wait pauses the log stream until it settles', async (t) => {
  const stream = new PassThrough();
  const caller = { call: async () => stream } as unknown as EngineCaller;
  const written: string[] = [];
  let release: () => void = () => undefined;
  const printer = new DecisionPrinter({ follow: true, denied: false, json: true }, (text) => {
    written.push(text);
    // The first line fills the pipe; the rest go through at once.
    return written.length === 1 ? new Promise<void>((resolve) => (release = resolve)) : undefined;
  });
  const read = await readContainerLogs(caller, 'cap-x-egress', { follow: true, onOutput: printer.push });
  stream.write(frame(record(1)));
  await tick();
  for (let n = 2; n <= 50; n++) stream.write(frame(record(n)));
  await tick();
  t.equal(written.length, 1, 'nothing more is read while the first write waits');
  t.ok(stream.isPaused(), 'the engine stream is paused');
  release();
  await tick();
  t.equal(written.length, 50, 'every line follows once it drained');
  t.match(written[49], /h50\.example/);
  stream.end();
  await read.finished;
});

t.test('writes that need no wait leave the stream flowing', async (t) => {
  const printer = new DecisionPrinter({ follow: false, denied: false, json: true }, () => true);
  t.equal(printer.push('stdout', Buffer.from(record(1))), undefined, 'a plain write asks nothing');
  const waiting = new DecisionPrinter({ follow: false, denied: false, json: true }, () => Promise.resolve());
  t.ok(waiting.push('stdout', Buffer.from(record(1))) instanceof Promise, 'a promise back is handed on');
  t.equal(waiting.push('stdout', Buffer.from('not json\n')), undefined, 'a skipped line writes nothing and asks nothing');
});
