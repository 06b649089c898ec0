#!/usr/bin/env node
/** Entry of the `capybara-sandbox` bin (see run.ts). */
import { runOperator } from './run.js';

const code = await runOperator(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
});
process.exitCode = code;
