/**
 * `capybara-sandbox logs` against the real engine: a sandbox made through the real socket proxy,
 * an allowed and a refused request from inside it, then `logs`, `logs --denied` and `--json logs`
 * read from its egress proxy's container log through the engine itself. The refusal's body
 * points at `logs` (the controller's refusal hint). `-f` runs as the built bin: it shows a
 * decision made after it started, ends with 0 on SIGINT, and with 1 when the sandbox is destroyed
 * under it.
 */
import t from 'tap';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { engineSocketPath } from '../../support/docker.js';
import { fileNeeds, needUnmet } from '../../support/needs.js';
import { runOperator } from '../../../controller/operator/index.js';

await fileNeeds(t, 'engine');

const root = fileURLToPath(new URL('../../..', import.meta.url));
const BIN = join(root, 'dist/controller/operator/cli.js');

interface Ran { code: number; stdout: string; stderr: string }

t.test('logs of a sandbox: its decisions, its refusals, its records, followed', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env, provider } = s;
  const engine = ['--endpoint', `unix://${engineSocketPath()}`];
  const op = async (argv: string[]): Promise<Ran> => {
    let stdout = '';
    let stderr = '';
    const code = await runOperator([...engine, ...argv], { stdout: (x) => { stdout += x; }, stderr: (x) => { stderr += x; } });
    return { code, stdout, stderr };
  };
  const handle = await provider.create({ id: `${env.runId}-logs`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });
  const name = handle.id;
  const allowed = await provider.exec(handle, `curl -sS http://${UPSTREAM_HOST}/`);
  t.same([allowed.exitCode, allowed.stdout], [0, UPSTREAM_BODY], allowed.stderr);
  const refused = await provider.exec(handle, 'curl -sS -i http://example.com/');
  t.match(refused.stdout, /^X-Egress-Reason: host_not_allowed\r?$/m);
  t.match(refused.stdout, new RegExp(`host_not_allowed: example\\.com is not on the allowlist; the allowlist is the operator's: "capybara-sandbox allow ${name} HOST" allows a host, "capybara-sandbox logs ${name}" shows the decisions\\n?$`), 'the refusal points at logs and allow');
  t.notMatch(refused.stdout, /allowHosts/, 'not at a file the sandbox user cannot change');

  // The proxy writes its lines in batches, at least every 250 ms.
  let all: Ran = { code: -1, stdout: '', stderr: '' };
  for (let i = 0; i < 50 && !/denied .*example\.com/.test(all.stdout); i++) {
    all = await op(['logs', name]);
    if (!/denied .*example\.com/.test(all.stdout)) await new Promise((r) => setTimeout(r, 100));
  }

  await t.test('logs: one line per decision, readable', async (t) => {
    t.equal(all.code, 0, all.stderr);
    const lines = all.stdout.trimEnd().split('\n');
    t.match(lines, [
      /^\S+Z  allowed  GET upstream\.capybara\.test:80  rule upstream\.capybara\.test  status 200  up \d+ B, down \d+ B$/,
      /^\S+Z  denied   GET example\.com:80  host_not_allowed: example\.com is not on the allowlist$/,
    ]);
    t.equal(lines.length, 2, 'start-up lines are not decisions');
    t.equal(all.stderr, '', 'nothing skipped');
  });

  await t.test('logs --denied: the refusals only', async (t) => {
    const r = await op(['logs', name, '--denied']);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /^\S+Z  denied   GET example\.com:80  host_not_allowed: example\.com is not on the allowlist\n$/);
  });

  await t.test('--json logs: the proxy\'s own records', async (t) => {
    const r = await op(['--json', 'logs', name]);
    t.equal(r.code, 0, r.stderr);
    const records = r.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    t.same(records.map((x) => [x.event, x.decision, x.host, x.reason]), [
      ['decision', 'allow', UPSTREAM_HOST, undefined],
      ['decision', 'deny', 'example.com', 'host_not_allowed'],
    ]);
    t.ok(records.every((x) => x.service === 'capybara-egress' && typeof x.time === 'string'), 'as the proxy wrote them');
    const denied = await op(['--json', 'logs', name, '--denied']);
    t.same(denied.stdout.trimEnd().split('\n').map((l) => (JSON.parse(l) as { reason: string }).reason), ['host_not_allowed']);
  });

  await t.test('a sandbox that does not exist, or has no proxy', async (t) => {
    const missing = await op(['logs', `${env.runId}-nope`]);
    t.equal(missing.code, 1);
    t.match(missing.stderr, new RegExp(`^capybara-sandbox: not_found: no such sandbox cap-${env.runId}-nope`));
    const none = await provider.create({ id: `${env.runId}-logs-none`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
    const r = await op(['logs', none.id]);
    t.equal(r.code, 1);
    t.match(r.stderr, /has egress tier none, which has no egress proxy/);
    await provider.destroy(none);
  });

  await t.test('logs -f: a decision made after it started, then SIGINT ends it with 0', async (t) => {
    if (!existsSync(BIN)) return needUnmet(t, 'dist not built (npm run build)');
    const follow = spawnFollow(engine, name);
    await follow.until(/denied   GET example\.com:80/);
    const later = await provider.exec(handle, 'curl -sS -o /dev/null http://followed.example/');
    t.equal(later.exitCode, 0, later.stderr);
    await follow.until(/denied   GET followed\.example:80  host_not_allowed/);
    follow.child.kill('SIGINT');
    t.equal(await follow.exit, 0, follow.stderr());
  });

  await t.test('logs -f waits through a suspend, and goes on after the resume', async (t) => {
    if (!existsSync(BIN)) return needUnmet(t, 'dist not built (npm run build)');
    const follow = spawnFollow(engine, name);
    await follow.until(/followed\.example/);
    await provider.suspend(handle);
    await follow.untilErr(/the egress proxy \S+ is exited .*waiting for it to run again/);
    t.equal(await provider.resume(handle), 'running');
    const after = await provider.exec(handle, 'curl -sS -o /dev/null http://resumed.example/');
    t.equal(after.exitCode, 0, after.stderr);
    await follow.until(/denied   GET resumed\.example:80  host_not_allowed/);
    t.equal(follow.out().match(/GET followed\.example/g)?.length, 1, `nothing shown twice: ${follow.out()}`);
    follow.child.kill('SIGINT');
    t.equal(await follow.exit, 0, follow.stderr());
  });

  await t.test('logs -f ends with 1 when the sandbox is destroyed under it', async (t) => {
    if (!existsSync(BIN)) return needUnmet(t, 'dist not built (npm run build)');
    const follow = spawnFollow(engine, name);
    await follow.until(/followed\.example/);
    await provider.destroy(handle);
    t.equal(await follow.exit, 1, follow.stderr());
    t.match(follow.stderr(), new RegExp(`capybara-sandbox: not_found: (sandbox ${name} went away|the egress proxy ${name}-egress of sandbox ${name} was removed)`));
  });
});

/** The built bin following a sandbox's log; `until` (stdout) and `untilErr` wait (10 s at most) for its output to match. */
interface Following {
  readonly child: ChildProcessWithoutNullStreams;
  readonly exit: Promise<number | null>;
  until(re: RegExp): Promise<void>;
  untilErr(re: RegExp): Promise<void>;
  out(): string;
  stderr(): string;
}

function spawnFollow(engine: readonly string[], name: string): Following {
  const child = spawn(process.execPath, [BIN, ...engine, 'logs', name, '-f']);
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  void exit.then(() => clearTimeout(timer));
  const wait = async (re: RegExp, text: () => string): Promise<void> => {
    const deadline = Date.now() + 10_000;
    while (!re.test(text())) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`logs -f did not print ${String(re)}; stdout: ${out}; stderr: ${err}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return {
    child,
    exit,
    out: () => out,
    stderr: () => err,
    until: (re) => wait(re, () => out),
    untilErr: (re) => wait(re, () => err),
  };
}
