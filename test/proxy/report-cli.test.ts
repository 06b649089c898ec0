/**
 * Report mode as an operator meets it, through the built `capybara-egress` (dist/proxy/capybara-egress.mjs,
 * built by `npm test`): --mode, EGRESS_MODE and the policy file's `mode`; --check and the start
 * log say report mode loudly; and `capybara-egress report` turns the log of a real run (the
 * proxy's own lines, never typed by hand) into a policy that, enforced, allows what the run
 * needed and nothing else. Exit codes: 0, 1 (unreadable log), 2 (usage).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { loadPolicy, parseConfig } from '../../proxy/config.js';
import { freePort, listen } from '../support/loopback.js';
import { EGRESS_BASE_ENV, EGRESS_CLI, plainNode, runEgressCli } from '../support/plain-node.js';
import { rawRequest } from '../support/raw-client.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'egress-report-'));
const file = (name: string, text: string): string => {
  const p = path.join(dir, name);
  writeFileSync(p, text);
  return p;
};

t.test('the mode: from the policy file, --mode or EGRESS_MODE (which win over the file); anything else is refused', async (t) => {
  const load = (argv: string[], env: Record<string, string>, text = 'allowHosts: [a.test]\n') => {
    const config = parseConfig(argv, env);
    if (config === undefined) throw new Error('no config');
    return loadPolicy(config, () => text).mode;
  };
  t.equal(load(['--allow-hosts', 'a.test'], {}), 'enforce', 'the default');
  t.equal(load(['--allow-hosts', 'a.test', '--mode', 'report'], {}), 'report');
  t.equal(load([], { EGRESS_ALLOW_HOSTS: '', EGRESS_MODE: 'report' }), 'report', 'the variable, with an empty allowlist (learning from nothing)');
  t.equal(load(['--policy', 'p.yaml'], {}, 'allowHosts: [a.test]\nmode: report\n'), 'report', 'the file');
  t.equal(load(['--policy', 'p.yaml', '--mode', 'enforce'], {}, 'allowHosts: [a.test]\nmode: report\n'), 'enforce', 'the flag wins over the file');
  t.throws(() => parseConfig(['--allow-hosts', 'a.test', '--mode', 'log'], {}), { code: 'invalid_config', message: /^--mode: expected enforce or report/ });
  t.throws(() => parseConfig(['--allow-hosts', 'a.test'], { EGRESS_MODE: 'warn' }), { code: 'invalid_config', message: /^EGRESS_MODE: expected enforce or report/ });
});

t.test('check says report mode, with the warning', async (t) => {
  const res = await runEgressCli(['check', file('report.yaml', 'allowHosts: []\nmode: report\n')]);
  t.equal(res.status, 0);
  t.match(res.stdout, /^  mode: report$/m);
  t.match(res.stdout, /^warning: report mode: hosts off allowHosts and ports off connectPorts are ALLOWED/m);
  t.notMatch(res.stdout, /allowlist is empty/, 'an empty list is the usual start of a report run, not its own warning');
  const enforce = await runEgressCli(['check', file('enforce.yaml', 'allowHosts: [a.test]\n')]);
  t.match(enforce.stdout, /^  mode: enforce$/m);
  t.notMatch(enforce.stdout, /warning/);
});

async function waitFor(child: ChildProcess, output: { text: string }, pattern: RegExp, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!pattern.test(output.text)) {
    if (Date.now() > end || child.exitCode !== null) throw new Error(`did not see ${pattern} in: ${output.text.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Runs `capybara-egress report -` with `input` on stdin. */
function reportStdin(input: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const [cmd, argv] = plainNode(EGRESS_CLI, ['report', '-']);
  return new Promise((resolve) => {
    const child = execFile(cmd, argv, { encoding: 'utf8', env: EGRESS_BASE_ENV, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ status: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stdout, stderr });
    });
    child.stdin?.end(input);
  });
}

t.test('a run in report mode, then its report, enforced: what the run needed passes, nothing else', async (t) => {
  const web = http.createServer((_req, res) => res.writeHead(200, { 'Content-Length': '3' }).end('ok\n'));
  const webPort = await listen(web);
  t.teardown(() => web.close());
  const port = await freePort();
  const metricsPort = await freePort();
  const testHosts = JSON.stringify({ 'api.needed.test': '127.0.0.1', 'cdn.needed.test': '127.0.0.1', 'listed.test': '127.0.0.1', 'never.test': '127.0.0.1' });
  const output = { text: '' };
  const child = spawn(...plainNode(EGRESS_CLI, ['--listen', `127.0.0.1:${port}`, '--metrics-listen', `127.0.0.1:${metricsPort}`]), {
    env: { ...EGRESS_BASE_ENV, EGRESS_ALLOW_HOSTS: 'listed.test', EGRESS_MODE: 'report', CAPYBARA_EGRESS_TEST_HOSTS: testHosts },
  });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(child, output, /egress proxy listening/);
  await waitFor(child, output, /"event":"report_mode"/);
  t.match(output.text, /"level":40,[^\n]*"event":"report_mode"[^\n]*are ALLOWED and logged would_deny/, 'the start log warns, at warn level');
  t.match(output.text, /"event":"listening"[^\n]*"mode":"report"/, 'the listening line names the mode');
  const metrics = await rawRequest(metricsPort, 'GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n');
  metrics.socket.destroy();
  t.match(metrics.body, /^egress_report_mode 1$/m, '/metrics says so');

  const get = (host: string, extra = ''): string => `GET http://${host}:${webPort}/${extra} HTTP/1.1\r\nHost: ${host}:${webPort}\r\n\r\n`;
  for (const request of [get('api.needed.test'), get('api.needed.test', 'again'), get('cdn.needed.test'), get('listed.test'), get('127.0.0.1')]) {
    const res = await rawRequest(port, request);
    res.socket.destroy();
  }
  // Every decision line is written: the last one is the literal's refusal.
  await waitFor(child, output, /"reason":"ip_literal"/);
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  const log = file('run.log', output.text);

  const report = await runEgressCli(['report', log]);
  t.equal(report.status, 0, report.stderr);
  t.equal(report.stderr, '', 'every line of the proxy is one it knows');
  const entries = report.stdout.split('\n').filter((l) => l.startsWith('  - '));
  t.same(entries, [
    '  - "api.needed.test" # 2 requests; 2 would_deny; port ' + webPort,
    '  - "cdn.needed.test" # 1 request; 1 would_deny; port ' + webPort,
    '  - "listed.test" # 1 request; 1 would_deny; port ' + webPort,
  ], 'sorted; listed.test was on a port off connectPorts, so would_deny too');
  t.match(report.stdout, new RegExp(`^connectPorts: \\[${webPort}\\]$`, 'm'));
  t.match(report.stdout, /^#   \(no host name\): ip_literal x1$/m, 'the literal is refused in every mode, summed up, not listed');
  t.same((await reportStdin(output.text)).stdout, report.stdout.replace(`from ${log.slice(0, 80)}`, 'from stdin'), '- reads stdin alike');

  // The learned policy, enforced: the hosts the run needed pass, one it never asked for does not.
  const learned = file('learned.yaml', report.stdout);
  const enforcedPort = await freePort();
  const out2 = { text: '' };
  const enforced = spawn(...plainNode(EGRESS_CLI, ['--policy', learned, '--listen', `127.0.0.1:${enforcedPort}`]), { env: { ...EGRESS_BASE_ENV, CAPYBARA_EGRESS_TEST_HOSTS: testHosts } });
  enforced.stdout?.on('data', (d: Buffer) => (out2.text += d.toString()));
  t.teardown(() => enforced.kill('SIGKILL'));
  await waitFor(enforced, out2, /egress proxy listening/);
  t.notMatch(out2.text, /report_mode/, 'the learned file is enforced');
  for (const host of ['api.needed.test', 'cdn.needed.test']) {
    const res = await rawRequest(enforcedPort, get(host));
    res.socket.destroy();
    t.equal(res.status, 200, `${host} passes`);
  }
  const never = await rawRequest(enforcedPort, get('never.test'));
  never.socket.destroy();
  t.equal(never.reason, 'host_not_allowed', 'a host the run never asked for is refused');
});

t.test('report exit codes: a log without decisions, an unreadable log, usage errors', async (t) => {
  const none = await runEgressCli(['report', file('none.log', '{"level":30,"event":"listening"}\n')]);
  t.equal(none.status, 0);
  t.match(none.stdout, /^allowHosts: \[\]$/m);
  t.match(none.stderr, /has no decision lines/);
  const junk = await runEgressCli(['report', file('junk.log', 'a\nb\n{"level":30,"event":"listening"}\n')]);
  t.equal(junk.status, 0);
  t.match(junk.stderr, /2 of 3 lines in .*junk\.log were no JSON log line of the proxy/);
  const missing = await runEgressCli(['report', path.join(dir, 'missing.log')]);
  t.equal(missing.status, 1);
  t.match(missing.stderr, /cannot read .*missing\.log \(ENOENT\)/);
  t.equal((await runEgressCli(['report', dir])).status, 1, 'a directory');
  for (const args of [['report'], ['report', 'a.log', 'b.log'], ['report', '--json']]) {
    const usage = await runEgressCli(args);
    t.equal(usage.status, 2, args.join(' '));
    t.match(usage.stderr, /usage: capybara-egress report LOGFILE/);
  }
  t.match((await runEgressCli(['--help'])).stdout, /capybara-egress report LOGFILE/, '--help names it');
});
