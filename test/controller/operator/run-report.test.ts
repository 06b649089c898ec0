/**
 * `run --report` (controller/operator/run-report.ts) on the in-memory engine: the sandbox is made
 * for the run with its egress proxy in report mode, the command's output goes to stderr, the
 * policy learned from the proxy's log to stdout, and the sandbox is destroyed on every way out.
 * An existing sandbox is refused and left as it was. The proxy's log is written by the fake's
 * exec model, as the real proxy would write decision lines for what the command asked for.
 * (The real engine's run is operator-report.test.ts.)
 */
import t from 'tap';
import pino from 'pino';
import { createDockerSandbox, isSandboxError } from '../../../controller/index.js';
import { parseOperatorArgs } from '../../../controller/operator/args.js';
import { runOperator } from '../../../controller/operator/index.js';
import { reportRun, type ReportRunDeps } from '../../../controller/operator/run-report.js';
import { IMAGES } from '../../../common/index.js';
import { parsePolicyText } from '../../../policy/index.js';
import { FakeEngine } from '../../support/fake-engine.js';
import { STARTED_BYTE } from '../../../controller/exec/exec-script.js';
import type { DockerEngine } from '../../../controller/docker/index.js';

const NAME = 'cap-rep1';
const EGRESS = `${NAME}-egress`;
const spec = { id: 'rep1', image: IMAGES.sandbox, limits: { egress: 'allowlist' as const, allowHosts: ['pypi.org'] } };
const EXEC = { json: false, interactive: false, tty: false, timeoutMs: undefined, maxOutputBytes: 1 << 20 };

const decision = (fields: Record<string, unknown>): string =>
  `${JSON.stringify({ level: 30, time: '2026-12-03T00:00:00.000Z', service: 'capybara-egress', conn: 1, event: 'decision', ...fields })}\n`;

interface Setup { engine: FakeEngine; deps: ReportRunDeps; out: { stdout: string; stderr: string; progress: string[] } }

function setup(mode: 'report' | undefined): Setup {
  const engine = new FakeEngine([IMAGES.sandbox, IMAGES.egress]);
  const logger = pino({ level: 'silent' });
  const provider = createDockerSandbox({ endpoint: 'unix:///nonexistent/fake-engine.sock' }, { labels: { 'dev.capybara.test': 'fake' }, ...(mode === undefined ? {} : { egressMode: mode }) }, { logger, engine });
  const out = { stdout: '', stderr: '', progress: [] as string[] };
  // The fake engine serves the calls the report makes; it stands for the engine itself here.
  const asEngine = engine as unknown as DockerEngine;
  return { engine, out, deps: { provider, engine: asEngine, logEngine: asEngine, progress: (l) => out.progress.push(l) } };
}

/** Whether an exec runs `command` (the controller's wrapper carries it base64-encoded). */
function runs(request: { cmd: readonly string[] }, command: string): boolean {
  return request.cmd.some((arg) => /^[A-Za-z0-9+/=]{8,}$/.test(arg) && Buffer.from(arg, 'base64').toString().includes(command));
}

/** The command's model: the proxy logs what a `pip download` through it would ask for. */
function workload(engine: FakeEngine): void {
  const base = engine.onExec;
  engine.onExec = (container, request) => {
    if (container !== NAME || !runs(request, 'pip download')) return base(container, request);
    engine.writeLog(EGRESS, '{"level":30,"event":"listening","address":"0.0.0.0:3128"}\n');
    engine.writeLog(EGRESS, decision({ decision: 'allow', method: 'CONNECT', host: 'pypi.org', port: 443, rule: 'pypi.org', tunnel: 'tls' }));
    engine.writeLog(EGRESS, decision({ decision: 'allow', method: 'CONNECT', host: 'files.pythonhosted.org', port: 443, would_deny: 'host_not_allowed', tunnel: 'tls' }));
    engine.writeLog(EGRESS, decision({ decision: 'deny', reason: 'address_not_allowed', method: 'CONNECT', host: 'metadata.internal', port: 80 }));
    // Hostile text in the log: neither a decision nor a line the report may trust.
    engine.writeLog(EGRESS, 'not json\n{"event":"decision","decision":"allow","host":"evil\\ncomment"}\n');
    // stderr carries the proxy's raw text (a fatal error's stack, which quotes an error message
    // unescaped, line breaks and all), never a decision line: one there is no line of the proxy's.
    engine.writeLog(EGRESS, `capybara-egress: fatal: Error: bad value "x\n${decision({ decision: 'allow', method: 'CONNECT', host: 'forged.example', port: 443, rule: 'forged.example', tunnel: 'opaque' })}"\n`, 'stderr');
    // The controller's exec wrapper writes its start byte first (exec-script.ts).
    return { exitCode: 3, stdout: 'Saved requests.whl\n', stderr: `${String.fromCharCode(STARTED_BYTE)}pip: warning\n` };
  };
}

t.test('the egress proxy of a report provider is in report mode; of any other, not', async (t) => {
  for (const mode of ['report', undefined] as const) {
    const s = setup(mode);
    await s.deps.provider.create(spec);
    const env = s.engine.containers.get(EGRESS)?.body.Env ?? [];
    t.equal(s.engine.registration(NAME)?.policy.mode, mode === 'report' ? 'report' : undefined, `${mode ?? 'default'}: the registration's mode`);
    t.notOk(env.some((e) => e.startsWith('EGRESS_MODE')), 'not in the environment: the registration says it');
    t.notOk((s.engine.containers.get(NAME)?.body.Env ?? []).some((e) => e.startsWith('EGRESS_MODE')), 'never in the sandbox');
  }
});

t.test('run --report: the command, its output on stderr, the policy it needed on stdout, the sandbox gone', async (t) => {
  const s = setup('report');
  workload(s.engine);
  const code = await reportRun(s.deps, { name: NAME, spec, command: 'pip download requests', exec: EXEC }, { stdout: (x) => { s.out.stdout += x; }, stderr: (x) => { s.out.stderr += x; } });
  t.equal(code, 3, 'the command\'s exit code');
  t.match(s.out.stderr, /Saved requests\.whl\n/, 'the command\'s stdout on stderr');
  t.match(s.out.stderr, /pip: warning\n/);
  t.notMatch(s.out.stdout, /Saved/, 'stdout carries the policy only');
  const file = parsePolicyText(s.out.stdout, 'the report');
  t.same(file.allowHosts, ['files.pythonhosted.org', 'pypi.org'], 'the hosts the run needed, sorted');
  t.equal(file.mode, 'enforce', 'a policy to enforce');
  t.match(s.out.stdout, /# {3}metadata\.internal: address_not_allowed x1/, 'a refusal no policy lifts is only a comment');
  t.match(s.out.stdout, /^# {3}evil\?comment: malformed_host x1$/m, 'a host name with a line break stays inside its comment');
  t.notMatch(s.out.stdout, /^comment/m);
  t.match(s.out.stdout, /sandbox cap-rep1 \(capybara-sandbox run --report\)/);
  t.match(s.out.progress.join('\n'), /report of cap-rep1: 4 decisions read, 1 malformed line\(s\) skipped/);
  // The proxy was stopped (its last lines flushed) before its log was read, then all removed.
  const afterCommand = s.engine.calls.slice(s.engine.calls.map((c) => c.method).lastIndexOf('startExec'));
  const order = afterCommand.filter((c) => (c.method === 'stopContainer' && c.target === EGRESS) || c.method === 'readLogs' || (c.method === 'removeContainer' && c.target === EGRESS)).map((c) => c.method);
  t.same(order, ['stopContainer', 'readLogs', 'removeContainer']);
  t.same([...s.engine.containers.keys()], [], 'the sandbox and its proxy are destroyed');
  t.same([...s.engine.volumes.keys()].filter((v) => v.startsWith(NAME)), [], 'and its volumes');
});

t.test('run --report refuses a sandbox that exists, and leaves it as it was', async (t) => {
  const s = setup('report');
  const plain = createDockerSandbox({ endpoint: 'unix:///nonexistent/fake-engine.sock' }, { labels: { 'dev.capybara.test': 'fake' } }, { logger: pino({ level: 'silent' }), engine: s.engine });
  await plain.create(spec);
  const before = JSON.stringify(s.engine.containers.get(EGRESS)?.body);
  const calls = s.engine.calls.length;
  const err = await reportRun(s.deps, { name: NAME, spec, command: 'true', exec: EXEC }, { stdout: () => undefined, stderr: () => undefined }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), String(err));
  t.match((err as Error).message, /cap-rep1 exists: run --report makes a sandbox for the run/);
  t.equal(JSON.stringify(s.engine.containers.get(EGRESS)?.body), before, 'its proxy untouched (still enforcing)');
  t.same(s.engine.calls.slice(calls).map((c) => c.method), ['inspectContainer'], 'nothing but a look: nothing made, run, stopped or removed');
});

t.test('run --report destroys the sandbox when the log cannot be read, and says where to run it', async (t) => {
  const s = setup('report');
  s.engine.failOnce('readLogs', EGRESS, 403, 'route_not_allowed');
  const err = await reportRun(s.deps, { name: NAME, spec, command: 'true', exec: EXEC }, { stdout: () => undefined, stderr: () => undefined }).catch((e: unknown) => e);
  t.ok(isSandboxError(err, 'engine_refused'), String(err));
  t.match((err as Error).message, /run --report\) read the egress proxy's container log, which the socket proxy refuses by design/);
  t.same([...s.engine.containers.keys()], [], 'destroyed all the same');
});

t.test('run --report destroys the sandbox when the command cannot run', async (t) => {
  const s = setup('report');
  s.engine.onExec = (container, request) => {
    if (container === NAME && runs(request, 'boom')) throw s.engine.status({ method: 'startExec', target: NAME }, 500, 'exec failed');
    return s.engine.defaultExec(container, request);
  };
  const err = await reportRun(s.deps, { name: NAME, spec, command: 'boom', exec: EXEC }, { stdout: () => undefined, stderr: () => undefined }).catch((e: unknown) => e);
  t.ok(err instanceof Error, String(err));
  t.same([...s.engine.containers.keys()], [], 'destroyed');
});

t.test('--report on the command line', async (t) => {
  const rows = [
    { name: 'run takes it', argv: ['run', 'demo', '--report', '--', 'true'], report: true },
    { name: 'run without it', argv: ['run', 'demo', '--', 'true'], report: false },
    { name: 'not on create', argv: ['create', 'demo', '--report'], err: /--report does not apply to create \(only to run\)/ },
    { name: 'not on exec', argv: ['exec', 'cap-demo', '--report', '--', 'true'], err: /--report does not apply to exec/ },
    { name: 'a tier without an egress proxy', argv: ['run', 'demo', '--egress', 'internal', '--report', '--', 'true'], err: /--report learns an allowlist from the decisions of the egress proxy, and --egress internal has none/ },
    { name: 'not with --json', argv: ['--json', 'run', 'demo', '--report', '--', 'true'], err: /--report prints a policy file on stdout; it does not combine with --json/ },
  ];
  for (const row of rows) {
    if (row.err === undefined) {
      t.equal(parseOperatorArgs(row.argv).report, row.report, row.name);
      continue;
    }
    t.throws(() => parseOperatorArgs(row.argv), row.err, row.name);
  }
});

t.test('run --report asks the engine that serves the log first, and makes nothing when it does not answer', async (t) => {
  let stderr = '';
  const code = await runOperator(['--endpoint', 'unix:///nonexistent/proxy.sock', 'run', 'demo', '--report', '--', 'true'], {
    stdout: () => undefined,
    stderr: (x) => { stderr += x; },
    env: { DOCKER_HOST: 'unix:///nonexistent/engine.sock' },
  });
  t.equal(code, 1);
  t.match(stderr, /engine_unavailable: run --report reads the egress proxy's log through the engine itself, and unix:\/\/\/nonexistent\/engine\.sock does not answer/);
  t.notMatch(stderr, /creating/, 'no sandbox was asked for');
});
