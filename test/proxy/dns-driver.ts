/**
 * Runs inside private network and mount namespaces (started by dns-namespace.test.ts): /etc/resolv.conf is
 * replaced by one naming a test DNS server on this namespace's loopback port 53, which never
 * answers names under slow.test. Then, with the proxy's default resolver (no --dns-server), many
 * lookups that never get an answer are started at once and a name that does answer is looked up
 * behind them. Prints one JSON line: how long that lookup took, and its outcome.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createLookup } from '../../proxy/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { requireOwnNamespaces } from '../support/own-namespace.js';

requireOwnNamespaces(['net', 'mnt']);
execFileSync('ip', ['link', 'set', 'lo', 'up']);
const dir = mkdtempSync(path.join(tmpdir(), 'egress-resolv-'));
writeFileSync(path.join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\n');
execFileSync('mount', ['--bind', path.join(dir, 'resolv.conf'), '/etc/resolv.conf']);

const dns = await startDnsServer(53);
dns.set('fast.test', { answers: ['93.184.215.14'] });
const lookup = createLookup({ servers: [], timeoutMs: 3_000 });
const hanging = Array.from({ length: 24 }, (_, i) => {
  dns.set(`r${i}.slow.test`, { timeout: true });
  return lookup(`r${i}.slow.test`);
});
await new Promise((r) => setTimeout(r, 100));
const started = performance.now();
const fast = await lookup('fast.test');
const ms = performance.now() - started;
process.stdout.write(`${JSON.stringify({ ms, fast })}\n`);
await Promise.all(hanging);
await dns.close();
