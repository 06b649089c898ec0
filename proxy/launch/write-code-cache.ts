/**
 * `node dist/proxy/launch/write-code-cache.js POLICY_FILE`: writes the code cache of the bundled
 * egress command (bundle-loader.ts) by checking POLICY_FILE with it. Run by `npm run build`, and
 * by the egress image's build with the image's own node, since V8 takes a cache only from its
 * own version.
 */
import { fileURLToPath } from 'node:url';
import { writeCodeCache } from './bundle-loader.js';

const policy = process.argv[2];
if (policy === undefined) {
  process.stderr.write('usage: node dist/proxy/launch/write-code-cache.js POLICY_FILE (a policy the egress command can check)\n');
  process.exit(2);
}
writeCodeCache(fileURLToPath(new URL('../capybara-egress.cjs', import.meta.url)), ['check', policy]);
