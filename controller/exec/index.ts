/**
 * Running things inside a sandbox: commands with timeouts, aborts, output caps and kills, file
 * reads and writes, and the bash scripts they run.
 */
export { CommandRunner } from './commands.js';
export type { WithRunning } from './commands.js';
export { FileOps } from './files.js';
export { OutputCapture } from './output-capture.js';
export { ROOT_USER, SANDBOX_USER, shellQuote } from './exec-script.js';
