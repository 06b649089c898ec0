#!/usr/bin/env node
/** Entry of the `capybara-sandbox` bin (see run.ts). */
import { runOperator } from './run.js';

const code = await runOperator(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
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
