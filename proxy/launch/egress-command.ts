#!/usr/bin/env node
/**
 * `capybara-egress` as installed (package.json's bin, the egress image's entrypoint): runs the
 * bundled command (../cli.ts, bundled by scripts/build.mjs) from its code cache
 * (bundle-loader.ts). scripts/build.mjs bundles this file too, into
 * dist/proxy/capybara-egress.mjs: the bundle is beside it, and it runs only from there.
 */
import { fileURLToPath } from 'node:url';
import { runBundle } from './bundle-loader.js';

runBundle(fileURLToPath(new URL('./capybara-egress.cjs', import.meta.url)));
