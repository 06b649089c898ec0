/**
 * The `capybara-egress` command as an operator meets it: fail-closed start-up with messages that
 * name the problem, and live policy reload by SIGHUP and by file change that never fails open.
 * Runs the built command, dist/proxy/capybara-egress.mjs: run through `npm test`, which compiles first.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { EGRESS_ENV } from '../../common/index.js';
import { MIN_OPEN_FILES, openFilesFor, planDescriptors } from '../../proxy/budget/fd-budget.js';
import { planMemory } from '../../proxy/budget/memory-plan.js';
import { createProxyMetrics } from '../../proxy/record/metrics.js';
import { freePort } from '../support/loopback.js';
import { EGRESS_BASE_ENV, EGRESS_CLI, plainNode, runEgressCli } from '../support/plain-node.js';
import { rawRequest, readUntil } from '../support/raw-client.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'egress-cli-'));
// Every test starts proxies of its own (own files, own ports): they run side by side.
t.jobs = 3;

const failures: { name: string; args: string[]; env?: Record<string, string>; file?: string; message: RegExp }[] = [
  { name: 'no policy at all', args: [], message: /no policy: give --policy FILE/ },
  { name: 'both a file and a list', args: ['--allow-hosts', 'a.example'], env: { EGRESS_POLICY_FILE: '/x' }, message: /both EGRESS_POLICY_FILE and --allow-hosts/ },
  { name: 'missing policy file', args: ['--policy', '/nonexistent/policy.yaml'], message: /\/nonexistent\/policy\.yaml[\s\S]*ENOENT/ },
  { name: 'invalid entry in the file', args: ['--policy', 'FILE'], file: 'allowHosts:\n  - good.example\n  - 10.0.0.1\n', message: /policy\.yaml[\s\S]*allowHosts\[1\][\s\S]*IP literal/ },
  { name: 'unknown key in the file', args: ['--policy', 'FILE'], file: 'allowHosts: []\nallowHost: [x]\n', message: /policy\.yaml[\s\S]*Unrecognized key/ },
  { name: 'bad listen address', args: ['--allow-hosts', 'a.example', '--listen', 'nope'], message: /--listen: "nope" is not HOST:PORT/ },
  { name: 'a listen port out of range', args: ['--allow-hosts', 'a.example', '--listen', '0.0.0.0:99999'], message: /--listen: "0\.0\.0\.0:99999": port 99999 is out of range \(0-65535; 0 picks a free one\)/ },
  { name: 'bad port list from the environment', args: ['--allow-hosts', 'a.example'], env: { ALLOW_CONNECT_PORTS: '443,ssh' }, message: /ALLOW_CONNECT_PORTS: "ssh" is not a port list/ },
  { name: 'bad test hosts JSON', args: ['--allow-hosts', 'a.example'], env: { CAPYBARA_EGRESS_TEST_HOSTS: '{' }, message: /CAPYBARA_EGRESS_TEST_HOSTS: not valid JSON/ },
  { name: 'bad test host address', args: ['--allow-hosts', 'a.example'], env: { CAPYBARA_EGRESS_TEST_HOSTS: '{"a.example":"x"}' }, message: /CAPYBARA_EGRESS_TEST_HOSTS[\s\S]*"x" is not an IP address/ },
  { name: 'bad allowlist from the environment', args: [], env: { EGRESS_ALLOW_HOSTS: 'a.example,*' }, message: /EGRESS_ALLOW_HOSTS[\s\S]*allowHosts\[1\]/ },
  { name: 'unknown flag', args: ['--allow-hosts', 'a.example', '--frobnicate'], message: /Unknown option '--frobnicate'/ },
  { name: 'bad DNS server', args: ['--allow-hosts', 'a.example', '--dns-server', 'dns.example'], message: /--dns-server: "dns\.example" is not IP, IP:PORT or \[IPv6\]:PORT/ },
  { name: 'a DNS server that is no address', args: ['--allow-hosts', 'a.example'], env: { EGRESS_DNS_SERVERS: '999.1.1.1' }, message: /EGRESS_DNS_SERVERS: "999\.1\.1\.1" is not IP/ },
  { name: 'a DNS server port out of range', args: ['--allow-hosts', 'a.example', '--dns-server', '127.0.0.1:99999'], message: /--dns-server: "127\.0\.0\.1:99999" has a port outside 1-65535/ },
  { name: 'a wildcard over a public suffix', args: [], env: { EGRESS_ALLOW_HOSTS: 'a.example,*.co.uk' }, message: /EGRESS_ALLOW_HOSTS[\s\S]*allowHosts\[1\][\s\S]*public suffix/ },
  { name: 'a wildcard over a private-section suffix (variable)', args: [], env: { EGRESS_ALLOW_HOSTS: 'a.example,*.duckdns.org' }, message: /EGRESS_ALLOW_HOSTS[\s\S]*allowHosts\[1\][\s\S]*"duckdns\.org" is a public suffix[\s\S]*"example\.duckdns\.org"/ },
  { name: 'a wildcard over a private-section suffix (flag)', args: ['--allow-hosts', '*.ngrok.io'], message: /allowHosts\[0\][\s\S]*"ngrok\.io" is a public suffix/ },
  { name: 'a wildcard over a private-section suffix (file)', args: ['--policy', 'FILE'], file: 'allowHosts:\n  - good.example\n  - "*.workers.dev"\n', message: /policy\.yaml[\s\S]*allowHosts\[1\][\s\S]*"workers\.dev" is a public suffix/ },
  { name: 'unknown tunnel mode', args: ['--allow-hosts', 'a.example', '--tunnel-default', 'raw'], message: /--tunnel-default: expected tls or opaque/ },
  { name: 'TLS required and optional at once', args: ['--allow-hosts', 'a.example', '--tunnel-default', 'opaque'], env: { EGRESS_REQUIRE_SNI: 'true' }, message: /EGRESS_REQUIRE_SNI is true but --tunnel-default is opaque/ },
  { name: 'an opaque entry while TLS is required', args: ['--policy', 'FILE', '--require-sni', 'true'], file: 'allowHosts:\n  - a.example\n  - { host: ssh.example, tunnel: opaque }\n', message: /policy\.yaml[\s\S]*allowHosts\[1\][\s\S]*opaque tunnel is refused/ },
  { name: 'unknown log level', args: ['--allow-hosts', 'a.example', '--log-level', 'loud'], message: /--log-level: expected fatal, error/ },
  { name: 'a limit below its minimum', args: ['--allow-hosts', 'a.example', '--max-header-bytes', '10'], message: /--max-header-bytes: .*1024/ },
  { name: 'a timeout longer than a Node timer holds', args: ['--allow-hosts', 'a.example', '--header-timeout-ms', '3000000000'], message: /--header-timeout-ms: .*2147483647/ },
];
for (const c of failures) {
  t.test(`start-up fails closed: ${c.name}`, async (t) => {
    const file = path.join(mkdtempSync(path.join(dir, 'case-')), 'policy.yaml');
    if (c.file !== undefined) writeFileSync(file, c.file);
    const res = await runEgressCli(c.args.map((a) => (a === 'FILE' ? file : a)), c.env);
    t.equal(res.status, 2, 'exits 2');
    t.match(res.stderr, c.message);
    t.equal(res.stdout, '', 'nothing on stdout');
  });
}

// A listener that cannot start (its port taken) stops the proxy: it must never serve without its
// metrics, its policy watch or its reload signal, which would keep a removed host reachable.
for (const which of ['--listen', '--metrics-listen'] as const) {
  t.test(`start-up fails closed: ${which} on a port already taken`, async (t) => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    t.teardown(() => taken.close());
    const busy = `127.0.0.1:${(taken.address() as net.AddressInfo).port}`;
    const free = `127.0.0.1:${await freePort()}`;
    const res = await runEgressCli(['--allow-hosts', 'a.example', '--listen', which === '--listen' ? busy : free, '--metrics-listen', which === '--metrics-listen' ? busy : `127.0.0.1:${await freePort()}`]);
    t.equal(res.status, 2, 'exits 2');
    t.match(res.stderr, new RegExp(`cannot listen: ${which} \\(EGRESS_[A-Z_]+\\): .*EADDRINUSE.*: stop what holds that port, or choose another`));
  });
}

t.test('--help prints usage and every environment twin', async (t) => {
  const res = await runEgressCli(['--help']);
  t.equal(res.status, 0);
  for (const v of Object.values(EGRESS_ENV)) t.match(res.stdout, v);
});

async function waitFor(child: ChildProcess, output: { text: string }, pattern: RegExp, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!pattern.test(output.text)) {
    if (Date.now() > end || child.exitCode !== null) throw new Error(`did not see ${pattern} in: ${output.text.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

t.test('a SIGHUP while the proxy starts never ends it, and the reload it asks for happens', async (t) => {
  // A policy of 20,000 hosts keeps the start busy for a while (its read and checks); the signal is
  // sent as soon as the process catches SIGHUP (its mask in /proc), which its first line of
  // serving asks for, and before the proxy says it listens. The policy is a regular file: the
  // proxy refuses a FIFO or a device as its policy.
  const file = path.join(mkdtempSync(path.join(dir, 'hup-')), 'policy.yaml');
  writeFileSync(file, `allowHosts:\n${Array.from({ length: 20_000 }, (_, i) => `  - h${i}.start.test\n`).join('')}`);
  const catchesHangUp = (pid: number): boolean => {
    try {
      const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? '0';
      return (BigInt(`0x${mask}`) & 1n) === 1n; // bit 0: signal 1, SIGHUP
    } catch {
      return false;
    }
  };
  // A start that listened before the signal went out (a machine fast for once) proves nothing: a
  // new process is started, a few times at most.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const output = { text: '' };
    const child = spawn(...plainNode(EGRESS_CLI, ['--policy', file, '--listen', `127.0.0.1:${port}`]), { env: EGRESS_BASE_ENV });
    child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
    t.teardown(() => child.kill('SIGKILL'));
    const deadline = Date.now() + 20_000;
    while (!catchesHangUp(child.pid ?? 0) && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    t.ok(catchesHangUp(child.pid ?? 0), 'the starting proxy catches SIGHUP');
    child.kill('SIGHUP');
    const early = !/egress proxy listening/.test(output.text);
    if (!early && attempt < 5) {
      child.kill('SIGKILL');
      continue;
    }
    t.ok(early, `the signal went out before the proxy listened (attempt ${attempt})`);
    await waitFor(child, output, /egress proxy listening/);
    await waitFor(child, output, /"policy_reload(ed|_failed)","why":"SIGHUP"/);
    t.equal(child.exitCode, null, 'still running');
    t.equal(child.signalCode, null, 'not ended by the signal');
    t.match(output.text, /"policy_reloaded","why":"SIGHUP"/, 'the reload asked for during the start was done');
    return;
  }
});

t.test('SIGHUP and file changes reload the policy; an invalid file keeps the old one', async (t) => {
  const upstream = net.createServer((s) => s.on('data', (d) => s.write(d)));
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const upstreamPort = (upstream.address() as net.AddressInfo).port;
  const port = await freePort();
  const metricsPort = await freePort();
  const file = path.join(mkdtempSync(path.join(dir, 'reload-')), 'reload.yaml');
  const write = (text: string): void => {
    // Replace by rename, as editors and config managers do.
    writeFileSync(`${file}.tmp`, text);
    renameSync(`${file}.tmp`, file);
  };
  write(`allowHosts: [one.test]\nconnectPorts: [${upstreamPort}]\n`);
  const output = { text: '' };
  // The upstream echoes plain bytes: entries without a tunnel mode are opaque here.
  const child = spawn(...plainNode(EGRESS_CLI, ['--policy', file, '--listen', `127.0.0.1:${port}`, '--metrics-listen', `127.0.0.1:${metricsPort}`, '--tunnel-default', 'opaque']), {
    env: { ...EGRESS_BASE_ENV, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'one.test': '127.0.0.1', 'two.test': '127.0.0.1' }) },
  });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => {
    child.kill('SIGKILL');
    upstream.close();
  });
  await waitFor(child, output, /egress proxy listening/);
  const scrape = async (): Promise<string> => {
    const res = await rawRequest(metricsPort, 'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    t.equal(res.status, 200);
    return res.body + (await readUntil(res.socket, undefined));
  };
  const gauge = (text: string, name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
  const atStart = await scrape();
  t.equal(gauge(atStart, 'egress_policy_last_reload_successful'), 1, 'the policy read at start counts as a successful load');
  for (const name of ['process_cpu_seconds_total', 'process_open_fds', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) {
    t.ok(gauge(atStart, name) >= 0, `the process metrics include ${name}`);
  }
  const startedAt = gauge(atStart, 'egress_policy_loaded_timestamp_seconds');
  t.ok(Math.abs(startedAt - Date.now() / 1000) < 60, 'the policy in force was loaded just now');

  const connect = (host: string) => rawRequest(port, `CONNECT ${host}:${upstreamPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  const tunnel = await connect('one.test');
  t.equal(tunnel.status, 200, 'one.test allowed at start');
  t.equal((await connect('two.test')).reason, 'host_not_allowed');

  write(`allowHosts: [two.test]\nconnectPorts: [${upstreamPort}]\n`);
  child.kill('SIGHUP');
  await waitFor(child, output, /"policy_reloaded"/);
  t.equal((await connect('two.test')).status, 200, 'two.test allowed after reload');
  t.equal((await connect('one.test')).reason, 'host_not_allowed', 'one.test no longer allowed');
  tunnel.socket.write('ping');
  t.match(await readUntil(tunnel.socket, 'ping'), 'ping', 'the tunnel opened before the reload still works');
  tunnel.socket.destroy();

  write('allowHosts: [10.0.0.1]\n');
  child.kill('SIGHUP');
  await waitFor(child, output, /"policy_reload_failed"/);
  t.match(output.text, /IP literal/, 'the log says why');
  t.equal((await connect('two.test')).status, 200, 'the previous policy stays in force');
  t.equal((await connect('one.test')).reason, 'host_not_allowed', 'and does not fail open');
  const afterFailure = await scrape();
  t.equal(gauge(afterFailure, 'egress_policy_last_reload_successful'), 0, 'the failed reload shows in the metrics');
  const inForce = gauge(afterFailure, 'egress_policy_loaded_timestamp_seconds');
  t.ok(inForce >= startedAt && gauge(afterFailure, 'egress_policy_last_reload_timestamp_seconds') >= inForce, 'the reload was tried after the policy in force was loaded');

  write(`allowHosts: [one.test, two.test]\nconnectPorts: [${upstreamPort}]\n`);
  await waitFor(child, output, /"policy_reloaded","why":"file changed","allowHosts":2/);
  t.equal((await connect('one.test')).status, 200, 'a file change alone reloads');

  const afterChange = await scrape();
  t.match(afterChange, /egress_decisions_total/);
  t.equal(gauge(afterChange, 'egress_policy_last_reload_successful'), 1, 'a good reload sets it back');
  t.ok(gauge(afterChange, 'egress_policy_loaded_timestamp_seconds') >= inForce);

  child.kill('SIGTERM');
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  t.equal(code, 0, 'SIGTERM stops cleanly');
});

t.test('a ConfigMap-style swap of the ..data symlink reloads the policy', async (t) => {
  // The layout Kubernetes gives a ConfigMap volume: policy.yaml -> ..data/policy.yaml, and
  // ..data -> a timestamped directory, replaced by renaming a new symlink over ..data.
  const volume = mkdtempSync(path.join(os.tmpdir(), 'egress-configmap-'));
  let generation = 0;
  const publish = (text: string): void => {
    generation += 1;
    const dir = `..gen_${generation}`;
    mkdirSync(path.join(volume, dir));
    writeFileSync(path.join(volume, dir, 'policy.yaml'), text);
    symlinkSync(dir, path.join(volume, '..data_tmp'));
    renameSync(path.join(volume, '..data_tmp'), path.join(volume, '..data'));
  };
  publish('allowHosts: [one.test]\n');
  symlinkSync('..data/policy.yaml', path.join(volume, 'policy.yaml'));
  const port = await freePort();
  const output = { text: '' };
  const child = spawn(...plainNode(EGRESS_CLI, ['--policy', path.join(volume, 'policy.yaml'), '--listen', `127.0.0.1:${port}`]), { env: EGRESS_BASE_ENV });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(child, output, /egress proxy listening/);
  publish('allowHosts: [one.test, two.test]\n');
  await waitFor(child, output, /"policy_reloaded","why":"file changed","allowHosts":2/);
  t.pass('reloaded after the symlink swap');
});

// A policy file reached through symlinks: every edit of what it resolves to must apply without
// SIGHUP. The deadline is below the watcher's 5 s re-check, so only a watch that saw the edit passes.
const RELOAD_DEADLINE_MS = 3_000;

interface LinkedPolicy {
  readonly name: string;
  /** Lays out the files under `root` with `text` in force; returns the path given to --policy. */
  layout(root: string, text: string): string;
  /** Each step changes what the configured path reads as, to `text`. */
  readonly steps: readonly ((root: string, text: string) => void)[];
}

/** Writes `file` by rename, as editors and config managers do. */
function replaceFile(file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
}

/** etc/policy.yaml -> ../data/policy.yaml */
function linkedFile(root: string, text: string): string {
  mkdirSync(path.join(root, 'etc'));
  mkdirSync(path.join(root, 'data'));
  writeFileSync(path.join(root, 'data', 'policy.yaml'), text);
  symlinkSync('../data/policy.yaml', path.join(root, 'etc', 'policy.yaml'));
  return path.join(root, 'etc', 'policy.yaml');
}

/**
 * A Kubernetes ConfigMap volume as the kubelet writes it: policy.yaml -> ..data/policy.yaml,
 * ..data -> a timestamped directory. An update writes a new timestamped directory, points a new
 * ..data_tmp link at it, renames that over ..data, and removes the old directory.
 */
let configMapGeneration = 0;
function configMapPublish(volume: string, text: string): void {
  configMapGeneration += 1;
  const stamp = `..2026_01_02_03_04_05.${configMapGeneration}`;
  const data = path.join(volume, '..data');
  let old: string | undefined;
  try {
    old = readlinkSync(data);
  } catch {
    old = undefined;
  }
  mkdirSync(path.join(volume, stamp));
  writeFileSync(path.join(volume, stamp, 'policy.yaml'), text);
  symlinkSync(stamp, path.join(volume, '..data_tmp'));
  renameSync(path.join(volume, '..data_tmp'), data);
  if (old !== undefined) rmSync(path.join(volume, old), { recursive: true });
}
function configMap(volume: string, text: string): string {
  configMapPublish(volume, text);
  symlinkSync('..data/policy.yaml', path.join(volume, 'policy.yaml'));
  return path.join(volume, 'policy.yaml');
}

const linked: LinkedPolicy[] = [
  {
    name: 'a symlink into another directory: the target replaced by rename',
    layout: linkedFile,
    steps: [(root, text) => replaceFile(path.join(root, 'data', 'policy.yaml'), text)],
  },
  {
    name: 'a symlink into another directory: the target edited in place',
    layout: linkedFile,
    steps: [(root, text) => writeFileSync(path.join(root, 'data', 'policy.yaml'), text)],
  },
  {
    name: 'a symlink into another directory: that directory removed and made again, then edited in place',
    layout: linkedFile,
    steps: [
      (root, text) => {
        rmSync(path.join(root, 'data'), { recursive: true });
        mkdirSync(path.join(root, 'data'));
        writeFileSync(path.join(root, 'data', 'policy.yaml'), text);
      },
      (root, text) => writeFileSync(path.join(root, 'data', 'policy.yaml'), text),
    ],
  },
  {
    name: 'a ConfigMap volume: ..data swapped by rename, the old directory removed',
    layout: configMap,
    steps: [configMapPublish, configMapPublish],
  },
  {
    name: 'a ConfigMap volume: the file edited in place, before and after a swap',
    layout: configMap,
    steps: [
      (volume, text) => writeFileSync(path.join(volume, '..data', 'policy.yaml'), text),
      configMapPublish,
      (volume, text) => writeFileSync(path.join(volume, '..data', 'policy.yaml'), text),
    ],
  },
];

for (const c of linked) {
  t.test(`policy through symlinks, reloaded without SIGHUP: ${c.name}`, async (t) => {
    const upstream = net.createServer((s) => s.on('data', (d) => s.write(d)));
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const upstreamPort = (upstream.address() as net.AddressInfo).port;
    // Step i allows host i only: each step removes the host the step before allowed.
    const hosts = Array.from({ length: c.steps.length + 1 }, (_, i) => `h${i}.test`);
    const policyFor = (i: number): string => `allowHosts: [${hosts[i]}]\nconnectPorts: [${upstreamPort}]\n`;
    const root = mkdtempSync(path.join(os.tmpdir(), 'egress-linked-'));
    const configured = c.layout(root, policyFor(0));
    const port = await freePort();
    const output = { text: '' };
    const child = spawn(...plainNode(EGRESS_CLI, ['--policy', configured, '--listen', `127.0.0.1:${port}`, '--tunnel-default', 'opaque']), {
      env: { ...EGRESS_BASE_ENV, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify(Object.fromEntries(hosts.map((h) => [h, '127.0.0.1']))) },
    });
    child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
    t.teardown(() => {
      child.kill('SIGKILL');
      upstream.close();
      rmSync(root, { recursive: true, force: true });
    });
    await waitFor(child, output, /egress proxy listening/);
    const reason = async (host: string): Promise<string | undefined> => {
      const res = await rawRequest(port, `CONNECT ${host}:${upstreamPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
      res.socket.destroy();
      return res.status === 200 ? 'allowed' : res.reason;
    };
    t.equal(await reason(hosts[0]!), 'allowed', `${hosts[0]} allowed at start`);
    for (let i = 1; i < hosts.length; i++) {
      const before = hosts[i - 1]!;
      const after = hosts[i]!;
      c.steps[i - 1]!(root, policyFor(i));
      const start = Date.now();
      while ((await reason(before)) !== 'host_not_allowed') {
        if (Date.now() - start > RELOAD_DEADLINE_MS) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const tookMs = Date.now() - start;
      t.equal(await reason(before), 'host_not_allowed', `step ${i}: ${before}, removed, is refused (after ${tookMs} ms, no SIGHUP)`);
      t.ok(tookMs <= RELOAD_DEADLINE_MS, `step ${i}: within ${RELOAD_DEADLINE_MS} ms`);
      t.equal(await reason(after), 'allowed', `step ${i}: ${after}, added, is allowed`);
    }
    // Log lines are batched: wait for the reload lines to be written.
    await waitFor(child, output, new RegExp(`"policy_reloaded","why":"file changed","allowHosts":1[\\s\\S]*"host":"${hosts[hosts.length - 1]!.replace('.', '\\.')}"`));
    t.notMatch(output.text, /"why":"SIGHUP"/, 'no SIGHUP reload');
  });
}

t.test('check validates a policy without binding a port: 0 valid, 1 invalid (each problem placed and explained), 2 usage', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'capybara-check-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, text: string): string => {
    const f = path.join(dir, name);
    writeFileSync(f, text);
    return f;
  };
  const good = file('good.yaml', 'allowHosts:\n  - a.example\n  - "*.b.example"\nconnectPorts: [443]\n');
  const ok = await runEgressCli(['check', good]);
  t.same([ok.status, ok.stdout], [0, `${good}: valid\n  allowHosts (2): a.example, *.b.example\n  connectPorts: 443\n  mode: enforce\n`]);
  t.same((await runEgressCli(['--policy', good, '--check'])).status, 0, '--check is the same');
  const ruled = file('ruled.yaml', 'allowHosts:\n  - { host: api.example, methods: [GET, HEAD], paths: ["/repos/org/*", "/exact"] }\n  - a.example\n');
  const withRules = await runEgressCli(['check', ruled]);
  t.same([withRules.status, withRules.stdout], [0, `${ruled}: valid\n  allowHosts (2): api.example, a.example\n  api.example: plain HTTP only, methods GET, HEAD; paths /repos/org/*, /exact\n  connectPorts: 443, 80\n  mode: enforce\n`], 'the rules of each entry that has them');
  const empty = await runEgressCli(['check', file('empty.yaml', 'allowHosts: []\n')]);
  t.same([empty.status, empty.stdout.split('\n').at(-2)], [0, 'warning: the allowlist is empty: every request is refused']);
  const rows: { name: string; text: string; says: string }[] = [
    { name: 'an unquoted wildcard (a YAML alias)', text: 'allowHosts:\n  - a.example\n  - *.example.org\n', says: 'line 3, column 5: *.example.org is read by YAML as an alias, not as a host name: quote entries that start with "*" ("*.example.org")' },
    { name: 'a tab indent, its whole message', text: 'allowHosts:\n\t- a.example\n', says: 'line 2, column 1: Tabs are not allowed as indentation: indent with spaces' },
    { name: 'a tunnel mode misspelled', text: 'allowHosts:\n  - { host: a.example, tunnel: opaqe }\n', says: 'allowHosts[0].tunnel (line 2, column 32): Invalid option: expected one of "tls"|"opaque"' },
    { name: 'a port in a host', text: 'allowHosts:\n  - a.example\n  - x.example:443\n', says: 'allowHosts[1] (line 3, column 5): "x.example:443": host names only; ports go in connectPorts: write "x.example"' },
    { name: 'a lower-case method', text: 'allowHosts:\n  - host: a.example\n    methods: [get]\n', says: 'allowHosts[0].methods[0] (line 3, column 15): "get": methods are case-sensitive (RFC 9110 §9.1) and clients send them in upper case; write "GET"' },
    { name: 'a path with an encoded slash', text: 'allowHosts:\n  - { host: a.example, paths: ["/a%2Fb/*"] }\n', says: 'allowHosts[0].paths[0] (line 2, column 32): "/a%2Fb/*": an encoded "/" (%2F), which some servers split on and others do not' },
    { name: 'a URL for a host', text: 'allowHosts: [https://x.example/]\n', says: 'allowHosts[0] (line 1, column 14): "https://x.example/": host names only, without a scheme, port or path: write "x.example" (ports go in connectPorts)' },
  ];
  for (const row of rows) {
    const f = file(`${row.name.replace(/\W+/g, '-')}.yaml`, row.text);
    const res = await runEgressCli(['check', f]);
    t.same([res.status, res.stdout], [1, ''], row.name);
    t.equal(res.stderr, `capybara-egress: invalid policy in ${f}:\n  ${row.says}\n`, row.name);
  }
  const usageErr = await runEgressCli(['check']);
  t.equal(usageErr.status, 2);
  t.match(usageErr.stderr, /check needs the policy file/);
  t.equal((await runEgressCli(['check', good, '--listen', 'nowhere'])).status, 2, 'a bad option is a usage error');
});

t.test('--version prints the package\'s version, and the metrics carry it', async (t) => {
  const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  const res = await runEgressCli(['--version']);
  t.same([res.status, res.stdout], [0, `capybara-egress ${version}\n`]);
  const text = await createProxyMetrics(() => 0).registry.metrics();
  t.match(text, `capybara_build_info{version="${version}",node="${process.versions.node}"} 1\n`);
});

t.test('a repeated --allow-hosts adds up', async (t) => {
  const res = await runEgressCli(['--allow-hosts', 'a.example', '--allow-hosts', 'b.example,c.example', '--check']);
  t.same([res.status, res.stdout.split('\n')[1]], [0, '  allowHosts (3): a.example, b.example, c.example']);
});

t.test('an allowlist variable that is set but empty starts a proxy that allows nothing', async (t) => {
  const port = await freePort();
  const output = { text: '' };
  const child = spawn(...plainNode(EGRESS_CLI, ['--listen', `127.0.0.1:${port}`]), { env: { ...EGRESS_BASE_ENV, EGRESS_ALLOW_HOSTS: '' } });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(child, output, /egress proxy listening/);
  await waitFor(child, output, /"event":"empty_allowlist"/);
  t.match(output.text, /the allowlist is empty: every request is refused \(EGRESS_ALLOW_HOSTS\)/, 'and says so');
  const res = await rawRequest(port, 'CONNECT a.example:443 HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(res.reason, 'host_not_allowed');
  res.socket.destroy();
});

// Each connection can hold two descriptors and each lookup in flight two more (fd-budget.ts): a
// limit that cannot hold them lowers both caps, and one that holds nothing stops the proxy.
t.test('an open-file limit too small for the limits lowers the caps, and says so', async (t) => {
  const nofile = MIN_OPEN_FILES + 16;
  const plan = planDescriptors(nofile, 16_384);
  t.same(plan, { maxConnections: 5, maxLookupsInFlight: 5 });
  const port = await freePort();
  const output = { text: '' };
  const child = spawn('prlimit', [`--nofile=${nofile}:${nofile}`, '--', ...plainNode(EGRESS_CLI, ['--allow-hosts', 'a.example', '--listen', `127.0.0.1:${port}`]).flat()], { env: EGRESS_BASE_ENV });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(child, output, /egress proxy listening/);
  const line = output.text.split('\n').find((l) => l.includes('limits_lowered'));
  t.match(JSON.parse(line ?? '{}'), { level: 40, openFileLimit: nofile, configured: 16_384, maxConnections: 5, maxLookupsInFlight: 5, needed: openFilesFor(16_384) });
  const held = await Promise.all(Array.from({ length: 5 }, () => rawConnected(port)));
  const sixth = await rawRequest(port, 'CONNECT a.example:443 HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(sixth.status, 503);
  t.equal(sixth.reason, 'too_many_connections');
  for (const s of [...held, sixth.socket]) s.destroy();
});

t.test('an open-file limit that holds nothing stops the proxy at start', async (t) => {
  const nofile = MIN_OPEN_FILES - 1;
  const res = spawnSync('prlimit', [`--nofile=${nofile}:${nofile}`, '--', ...plainNode(EGRESS_CLI, ['--allow-hosts', 'a.example', '--listen', '127.0.0.1:0']).flat()], { encoding: 'utf8', env: EGRESS_BASE_ENV, timeout: 30_000 });
  t.equal(res.status, 2, 'exits 2');
  t.match(res.stderr, new RegExp(`open-file limit is ${nofile}, and the proxy needs at least ${MIN_OPEN_FILES}`));
});

// A flood of connections past the caps: each is refused, and a refused connection used to keep
// its descriptor for the whole linger (5 s) while no longer counting against the caps, so the
// process ran out of descriptors and every new connection, the health check's too, was dropped
// at accept. The process must stay up and keep answering its health check during the flood.
t.test('a flood of connections past the caps: the process stays up and its health check answers during it', async (t) => {
  // Room for 86 connections; the flooding client may hold 10 of them, and is refused past that.
  const nofile = 600;
  t.equal(planDescriptors(nofile, 16_384)?.maxConnections, 86);
  const port = await freePort();
  const output = { text: '' };
  const args = ['--allow-hosts', 'a.example', '--listen', `127.0.0.1:${port}`, '--max-connections-per-client', '10'];
  const child = spawn('prlimit', [`--nofile=${nofile}:${nofile}`, '--', ...plainNode(EGRESS_CLI, args).flat()], { env: EGRESS_BASE_ENV });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(child, output, /egress proxy listening/);
  for (let round = 0; round < 3; round++) {
    // From a client address of its own, held open by a client that never reads or closes.
    const flood = await Promise.all(
      Array.from({ length: 1_000 }, () =>
        new Promise<net.Socket>((resolve) => {
          const s = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' }, () => resolve(s));
          s.on('error', () => resolve(s));
        }),
      ),
    );
    await new Promise((r) => setTimeout(r, 300));
    const health = await rawRequest(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', '127.0.0.1', 5_000).catch((err: Error) => ({ status: 0, error: err.message, socket: undefined }));
    t.equal(health.status, 200, `round ${round}: the health check answers during the flood`);
    health.socket?.destroy();
    t.equal(child.exitCode, null, `round ${round}: still running`);
    for (const s of flood) s.destroy();
  }
  t.notMatch(output.text, /fatal/, 'no fatal error');
});

// The memory plan (memory-plan.ts) at start: logged, and fitted to the memory the process may use.
t.test('the memory budget is planned at start and logged; a limit below the minimum stops the proxy', async (t) => {
  const port = await freePort();
  const output = { text: '' };
  const child = spawn(...plainNode(EGRESS_CLI, ['--allow-hosts', 'a.example', '--listen', `127.0.0.1:${port}`, '--memory-limit-mb', '256']), { env: EGRESS_BASE_ENV });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(child, output, /egress proxy listening/);
  const line = JSON.parse(output.text.split('\n').find((l) => l.includes('"memory_budget"')) ?? '{}') as Record<string, unknown>;
  const plan = planMemory({ bytes: 256 * 1024 * 1024, source: 'flag' }, 16_384, 0.25)!;
  // The default cap fitted to 256 MiB: information, not a warning (a healthy start warns of nothing).
  t.match(line, { level: 30, memoryLimitMb: 256, source: 'flag', budgetMb: Math.floor(plan.totalBytes / 2 ** 20), perClientMb: Math.floor(plan.perClientBytes / 2 ** 20), maxConnections: plan.maxConnections, configured: 16_384 });
  t.match(line.msg, /the connection caps are lowered/);
  // A cap the operator set, lowered: that is worth a warning.
  const setPort = await freePort();
  const setOut = { text: '' };
  const set = spawn(...plainNode(EGRESS_CLI, ['--allow-hosts', 'a.example', '--listen', `127.0.0.1:${setPort}`, '--memory-limit-mb', '256', '--max-connections', '20000']), { env: EGRESS_BASE_ENV });
  set.stdout?.on('data', (d: Buffer) => (setOut.text += d.toString()));
  t.teardown(() => set.kill('SIGKILL'));
  await waitFor(set, setOut, /egress proxy listening/);
  t.match(JSON.parse(setOut.text.split('\n').find((l) => l.includes('"memory_budget"')) ?? '{}'), { level: 40, configured: 20_000 });
  // The lowered total keeps one client to a quarter of it: the share never collapses to the whole.
  t.equal(line.maxConnectionsPerClient, Math.floor(plan.maxConnections / 4), `one client may hold ${String(line.maxConnectionsPerClient)} of ${plan.maxConnections}`);
  const res = await runEgressCli(['--allow-hosts', 'a.example', '--listen', '127.0.0.1:0'], { EGRESS_MEMORY_LIMIT_MB: '100' });
  t.equal(res.status, 2, 'exits 2');
  t.match(res.stderr, /the memory limit is 100 MiB \(from --memory-limit-mb\), and the proxy needs at least 128 MiB/);
  t.match((await runEgressCli(['--allow-hosts', 'a.example', '--memory-limit-mb', 'lots'])).stderr, /--memory-limit-mb: expected a whole number/);
});

/** A client connection the proxy has accepted and counts. */
async function rawConnected(port: number): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  return socket;
}
