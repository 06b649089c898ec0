/**
 * The deployment CA as an operator meets it through the built `capybara-egress`: `ca` prints (and
 * on first use makes) the CA, `--rotate` replaces it, `--inline` prints the EGRESS_CA_INLINE value;
 * processes starting at once make one CA; `--policy-json` / EGRESS_POLICY_JSON is a third policy
 * source; `check` names inspected entries; a policy that inspects with no usable CA does not start
 * (exit 1), and a policy that inspects nothing never touches the CA directory.
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { decodeInline } from '../../common/index.js';
import { freePort } from '../support/loopback.js';
import { EGRESS_BASE_ENV, EGRESS_CLI, plainNode, runEgressCli } from '../support/plain-node.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'egress-ca-cli-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = (): string => path.join(root, `ca-${++n}`);
const PEM = /^-----BEGIN CERTIFICATE-----\n[\s\S]+\n-----END CERTIFICATE-----\n$/;

t.test('ca prints the certificate, making the CA on first use only', async (t) => {
  const dir = fresh();
  const first = await runEgressCli(['ca', '--ca-dir', dir]);
  t.equal(first.status, 0, first.stderr);
  t.match(first.stdout, PEM);
  t.notMatch(first.stdout, /PRIVATE/, 'never the key');
  t.match(first.stderr, new RegExp(`made a new CA in ${dir} \\(sha256:[0-9a-f]{64}\\)`));
  t.equal(statSync(dir).mode & 0o777, 0o700);
  const again = await runEgressCli(['ca'], { EGRESS_CA_DIR: dir });
  t.equal(again.status, 0);
  t.equal(again.stdout, first.stdout, 'the same CA, from the variable');
  t.equal(again.stderr, '', 'nothing made');
});

t.test('processes starting at once on an empty directory make one CA', async (t) => {
  const dir = fresh();
  const runs = await Promise.all(Array.from({ length: 4 }, () => runEgressCli(['ca', '--ca-dir', dir])));
  t.same(runs.map((r) => r.status), [0, 0, 0, 0]);
  t.equal(new Set(runs.map((r) => r.stdout)).size, 1, 'one certificate');
  t.equal(runs.filter((r) => /made a new CA/.test(r.stderr)).length, 1, 'made by one of them');
});

t.test('--rotate replaces the CA and says who must take it; --inline prints certificate and key for a Secret', async (t) => {
  const dir = fresh();
  const before = await runEgressCli(['ca', '--ca-dir', dir]);
  const rotated = await runEgressCli(['ca', '--ca-dir', dir, '--rotate']);
  t.equal(rotated.status, 0);
  t.match(rotated.stdout, PEM);
  t.not(rotated.stdout, before.stdout, 'a new certificate');
  t.match(rotated.stderr, /a new CA in .*running proxies take it on SIGHUP or restart, and sandboxes must trust the new certificate/);
  const inline = await runEgressCli(['ca', '--ca-dir', dir, '--inline']);
  t.equal(inline.status, 0);
  const authority = await decodeInline(inline.stdout);
  t.equal(authority.certificatePem, rotated.stdout, 'the inline value holds the current CA');
  const fromInline = await runEgressCli(['ca'], { EGRESS_CA_INLINE: inline.stdout.trim() });
  t.equal(fromInline.stdout, rotated.stdout, 'ca with EGRESS_CA_INLINE prints its certificate');
  const rotateInline = await runEgressCli(['ca', '--rotate'], { EGRESS_CA_INLINE: inline.stdout.trim() });
  t.equal(rotateInline.status, 2);
  t.match(rotateInline.stderr, /--rotate makes a CA in a directory, and EGRESS_CA_INLINE is set/);
});

t.test('ca: usage errors exit 2, CA problems exit 1 with what to do', async (t) => {
  const help = await runEgressCli(['ca', '--help']);
  t.equal(help.status, 0);
  t.match(help.stdout, /usage: capybara-egress ca \[--ca-dir DIR\] \[--rotate\] \[--inline\][\s\S]*Kubernetes Secret/);
  const unknown = await runEgressCli(['ca', '--frobnicate']);
  t.equal(unknown.status, 2);
  t.match(unknown.stderr, /Unknown option '--frobnicate'[\s\S]*usage: capybara-egress ca/);
  const both = await runEgressCli(['ca', '--ca-dir', fresh()], { EGRESS_CA_INLINE: 'abc' });
  t.equal(both.status, 2);
  t.match(both.stderr, /both EGRESS_CA_INLINE and --ca-dir are set/);
  const open = fresh();
  mkdirSync(open);
  chmodSync(open, 0o755);
  const unsafe = await runEgressCli(['ca', '--ca-dir', open]);
  t.equal(unsafe.status, 1);
  t.match(unsafe.stderr, /has mode 0755, open to group or other.*chmod 700/);
  const garbage = await runEgressCli(['ca'], { EGRESS_CA_INLINE: 'not base64!' });
  t.equal(garbage.status, 1);
  t.match(garbage.stderr, /^capybara-egress ca: EGRESS_CA_INLINE: the inline CA is not base64/);
});

const INSPECTED = JSON.stringify({ allowHosts: [{ host: 'api.example.test', inspect: true, methods: ['GET'] }, 'plain.example.test'] });

t.test('--policy-json / EGRESS_POLICY_JSON: a third policy source, exclusive with the others, named in its errors', async (t) => {
  const check = await runEgressCli(['--policy-json', INSPECTED, '--check']);
  t.equal(check.status, 0, check.stderr);
  t.match(check.stdout, /^--policy-json: valid$/m);
  t.match(check.stdout, /^  api\.example\.test: inside the inspected TLS, methods GET$/m);
  t.match(check.stdout, /^  inspected \(1\): api\.example\.test: TLS terminated with the deployment CA$/m);
  const fromEnv = await runEgressCli(['--check'], { EGRESS_POLICY_JSON: '{"allowHosts": ["a.test"]}' });
  t.equal(fromEnv.status, 0);
  t.match(fromEnv.stdout, /^EGRESS_POLICY_JSON: valid\n  allowHosts \(1\): a\.test$/m);
  t.notMatch(fromEnv.stdout, /inspected/, 'nothing inspected, nothing said');
  const invalid = await runEgressCli(['--check'], { EGRESS_POLICY_JSON: '{"allowHosts": ["10.0.0.1"]}' });
  t.equal(invalid.status, 1);
  t.match(invalid.stderr, /EGRESS_POLICY_JSON[\s\S]*allowHosts\[0\][\s\S]*IP literal/);
  const notObject = await runEgressCli(['--check'], { EGRESS_POLICY_JSON: 'allowHosts: [a.test]' });
  t.equal(notObject.status, 1);
  t.match(notObject.stderr, /EGRESS_POLICY_JSON[\s\S]*expected a JSON object/);
  const both = await runEgressCli(['--allow-hosts', 'a.test', '--check'], { EGRESS_POLICY_JSON: '{"allowHosts": []}' });
  t.equal(both.status, 2);
  t.match(both.stderr, /both EGRESS_POLICY_JSON and --allow-hosts are set: give the allowlist one way only/);
  const none = await runEgressCli([]);
  t.match(none.stderr, /no policy: give --policy FILE \(EGRESS_POLICY_FILE\), --policy-json TEXT \(EGRESS_POLICY_JSON\) or --allow-hosts LIST/);
});

t.test('a policy that inspects, with no usable CA, does not start (exit 1), naming the hosts and what to do', async (t) => {
  const open = fresh();
  mkdirSync(open);
  chmodSync(open, 0o755);
  const listen = `127.0.0.1:${await freePort()}`;
  const res = await runEgressCli(['--policy-json', INSPECTED, '--ca-dir', open, '--listen', listen]);
  t.equal(res.status, 1);
  t.match(res.stderr, /the policy inspects api\.example\.test, which needs the deployment CA, and --ca-dir: .* has mode 0755.*chmod 700.*; the proxy does not start/);
  const badInline = await runEgressCli(['--policy-json', INSPECTED, '--listen', listen], { EGRESS_CA_INLINE: 'AAAA' });
  t.equal(badInline.status, 1);
  t.match(badInline.stderr, /the policy inspects api\.example\.test.*EGRESS_CA_INLINE: the inline CA must hold one certificate and one private key/);
  const badUpstream = await runEgressCli(['--policy-json', INSPECTED, '--ca-dir', fresh(), '--upstream-ca', '/dev/null', '--listen', listen]);
  t.equal(badUpstream.status, 1);
  t.match(badUpstream.stderr, /--upstream-ca: cannot read \/dev\/null \(not a regular file.*\); give a PEM bundle/);
});

t.test('a proxy whose policy inspects nothing never makes or reads a CA directory', async (t) => {
  const dir = fresh();
  const port = await freePort();
  const output = { text: '' };
  const child = spawn(...plainNode(EGRESS_CLI, ['--allow-hosts', 'a.test', '--listen', `127.0.0.1:${port}`, '--ca-dir', dir]), { env: { ...EGRESS_BASE_ENV, EGRESS_UPSTREAM_CA: '/dev/null' } });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  const end = Date.now() + 30_000;
  while (!/egress proxy listening/.test(output.text) && child.exitCode === null && Date.now() < end) await new Promise((r) => setTimeout(r, 25));
  t.match(output.text, /egress proxy listening/, 'it starts (not even the upstream bundle is read)');
  t.notOk(existsSync(dir), 'no CA directory');
  child.kill('SIGTERM');
});

t.test('a reload to a policy that inspects, with no usable CA, keeps the old policy and says why', async (t) => {
  const work = fresh();
  mkdirSync(work);
  const policy = path.join(work, 'policy.json');
  writeFileSync(policy, '{"allowHosts": ["a.test"]}');
  const open = fresh();
  mkdirSync(open);
  chmodSync(open, 0o755);
  const port = await freePort();
  const output = { text: '' };
  const child = spawn(...plainNode(EGRESS_CLI, ['--policy', policy, '--listen', `127.0.0.1:${port}`, '--ca-dir', open]), { env: EGRESS_BASE_ENV });
  child.stdout?.on('data', (d: Buffer) => (output.text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output.text += d.toString()));
  t.teardown(() => child.kill('SIGKILL'));
  const until = async (pattern: RegExp): Promise<void> => {
    const end = Date.now() + 30_000;
    while (!pattern.test(output.text) && child.exitCode === null && Date.now() < end) await new Promise((r) => setTimeout(r, 25));
  };
  await until(/egress proxy listening/);
  t.match(output.text, /egress proxy listening/);
  writeFileSync(path.join(work, 'next.json'), INSPECTED);
  renameSync(path.join(work, 'next.json'), policy);
  child.kill('SIGHUP');
  await until(/policy_reload_failed/);
  t.match(output.text, /"event":"policy_reload_failed"[^\n]*the policy inspects api\.example\.test, which needs the deployment CA, and --ca-dir: [^\n]*has mode 0755/);
  t.notMatch(output.text, /"event":"policy_reloaded"/, 'the old policy stays');
  t.equal(child.exitCode, null, 'still running');
  child.kill('SIGTERM');
});
