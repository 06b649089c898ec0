/**
 * How the egress command starts: its launcher and the code cache's writer (the two entries here,
 * run by path, never imported), and what they share (bundle-loader.ts).
 */
export { codeCacheOf, runBundle, writeCodeCache } from './bundle-loader.js';
