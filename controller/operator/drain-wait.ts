/**
 * A writer for the CLI's stdout that hands back a wait when the pipe is full (logs -f into a paused
 * pager). One wait per full spell, shared by every write until the drain: a listener per write
 * (a chunk of a log is hundreds of lines) piled up past Node's listener warning, printed on stderr.
 * Not events.once: it listens for 'error' too, and a reader gone (EPIPE) would reject it,
 * unhandled, instead of ending the command quietly (cli.ts, onWriteError).
 */
import type { Writable } from 'node:stream';

export function drainingWriter(out: Writable): (text: string) => Promise<void> | undefined {
  let drained: Promise<void> | undefined;
  return (text) => {
    if (out.write(text)) return undefined;
    drained ??= new Promise<void>((resolve) =>
      out.once('drain', () => {
        drained = undefined;
        resolve();
      }),
    );
    return drained;
  };
}
