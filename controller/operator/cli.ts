#!/usr/bin/env node
/** Entry of the `capybara-sandbox` bin (see run.ts). */
import { drainingWriter } from './drain-wait.js';
import { runOperator } from './run.js';

/**
 * Output that can no longer be written: its reader went away (EPIPE: `logs -f | head`, `ls | head
 * -1`), or its terminal closed (EIO). As a Unix tool on SIGPIPE, the command ends, without a stack
 * trace, with the status it has so far; a throw here would end the process before a command could
 * clean up. A command that listens for the failed write itself takes it over: a streamed exec
 * kills its command in the sandbox first (exec-command.ts). Later failed writes change nothing.
 */
let outputGone = false;
function onWriteError(this: NodeJS.WriteStream): void {
  if (outputGone) return;
  outputGone = true;
  if (this.listenerCount('error') === 1) process.exit(process.exitCode ?? 0);
}
process.stdout.on('error', onWriteError);
process.stderr.on('error', onWriteError);

const code = await runOperator(process.argv.slice(2), {
  // A full pipe (logs -f into a paused pager) asks the writer to wait for its drain.
  stdout: drainingWriter(process.stdout),
  stderr: (text) => process.stderr.write(text),
  // Only a command that asks (logs -f) takes SIGINT over; for the others it ends the process.
  onInterrupt: (handler) => {
    process.on('SIGINT', handler);
    return () => process.off('SIGINT', handler);
  },
  // exec and run: a command's output as bytes, and the stdin of -i.
  terminal: { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr },
});
process.exitCode = code;
