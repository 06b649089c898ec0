/**
 * `npm start`: the egress proxy, compiled first only when a source changed since the last build
 * (build.mjs's fingerprint), and saying so, since a first compile takes about a minute.
 *
 * The proxy then runs in this very process (the egress command, build.mjs's EGRESS_COMMAND, is
 * imported, with the arguments given to npm start), and package.json starts this script with
 * `exec`: npm's signals reach the proxy itself, so stopping `npm start` (Ctrl-C, SIGTERM) stops
 * the proxy, with nothing left listening. A signal during the compile stops the compiler and
 * this process.
 */
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { build, EGRESS_COMMAND, isBuilt, ROOT } from './build.mjs';

const say = (text) => process.stderr.write(`npm start: ${text}\n`);

if (!isBuilt()) {
  say('compiling the TypeScript sources into dist/ (they changed since the last build; about a minute on a fresh clone)');
  const started = Date.now();
  let compiler;
  const stop = (signal) => {
    compiler?.kill(signal);
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const status = await build(ROOT, (child) => (compiler = child));
  process.removeListener('SIGINT', stop);
  process.removeListener('SIGTERM', stop);
  if (status !== 0) {
    say(`the compile failed (tsc exited ${status}); fix the errors above, then run npm start again`);
    process.exit(status);
  }
  say(`compiled in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

const cli = join(ROOT, EGRESS_COMMAND);
process.argv = [process.argv[0], cli, ...process.argv.slice(2)];
await import(pathToFileURL(cli).href);
