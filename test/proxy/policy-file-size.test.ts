/**
 * The policy file and the secrets' files are read with a cap (proxy/config.ts MAX_POLICY_BYTES,
 * proxy/secrets MAX_SECRET_BYTES): a larger file, /dev/zero or a FIFO is refused at once with an
 * error naming the file and the limit, so the proxy does not start, and a reload keeps the old
 * policy (cli.ts's reloader keeps it on any error of loadPolicy).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { isCodedError } from '../../common/index.js';
import { loadPolicy, MAX_POLICY_BYTES, parseConfig } from '../../proxy/config.js';
import { MAX_SECRET_BYTES } from '../../proxy/secrets/index.js';

const dir = mkdtempSync(join(tmpdir(), 'policy-file-size-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const POLICY = 'allowHosts: [a.test]\n';

/** The policy loaded from `path` with the proxy's own reader, or the message of its PolicyError. */
function load(path: string): string {
  const config = parseConfig(['--policy', path], {});
  if (config === undefined) throw new Error('no config');
  try {
    return `${loadPolicy(config).allowHosts.length} hosts`;
  } catch (err) {
    if (!isCodedError(err, 'PolicyError')) throw err;
    return err.message;
  }
}

/** A file of `text` padded with a YAML comment to `bytes`. */
function padded(name: string, text: string, bytes: number): string {
  const path = join(dir, name);
  writeFileSync(path, `${text}#${'x'.repeat(bytes - text.length - 2)}\n`);
  return path;
}

t.test('a policy file up to 1 MiB loads; a larger one, /dev/zero or a FIFO is refused, naming the file and the limit', async (t) => {
  t.equal(MAX_POLICY_BYTES, 1024 * 1024);
  t.equal(load(padded('full.yaml', POLICY, MAX_POLICY_BYTES)), '1 hosts', 'exactly the cap');
  const over = padded('over.yaml', POLICY, MAX_POLICY_BYTES + 1);
  t.match(load(over), `invalid policy in ${over}:\n  (top level): cannot read the file: larger than 1048576 bytes, the most a policy may hold (1 MiB): check that it is the policy file, and shorten it`);
  t.match(load('/dev/zero'), /invalid policy in \/dev\/zero:\n.*not a regular file \(a directory, device or FIFO\); give the policy file itself/);
  const fifo = join(dir, 'policy.fifo');
  t.equal(spawnSync('mkfifo', [fifo]).status, 0);
  t.match(load(fifo), /not a regular file/, 'refused at once, not waited on');
});

t.test("a secret's file up to 64 KiB is its value; a larger one stops the load, naming the binding, the file and the limit", async (t) => {
  t.equal(MAX_SECRET_BYTES, 64 * 1024);
  const secret = (name: string, bytes: number): string => {
    const path = join(dir, name);
    writeFileSync(path, 'k'.repeat(bytes));
    return path;
  };
  const policy = (file: string): string => {
    const path = join(dir, 'secrets.yaml');
    writeFileSync(path, `allowHosts:\n  - host: api.test\n    inspect: true\n    secrets: [{ name: KEY, header: X-Key, file: ${file} }]\n`);
    return path;
  };
  t.equal(load(policy(secret('full', MAX_SECRET_BYTES))), '1 hosts', 'exactly the cap');
  const over = secret('over', MAX_SECRET_BYTES + 1);
  t.match(load(policy(over)), `allowHosts[0].secrets[0]: KEY: cannot read the file ${over}: larger than 65536 bytes, the most a secret may hold (64 KiB)`);
  t.match(load(policy('/dev/zero')), /KEY: cannot read the file \/dev\/zero: not a regular file/);
});
