/**
 * `run NAME --report -- COMMAND`: learns the allowlist a workload needs in one run. The sandbox is
 * made for the run (an existing one is refused: its proxy is never flipped to report mode), with
 * an egress proxy in report mode; the command's output goes to stderr; once it ends the sandbox is
 * stopped (the proxy flushes its log as it exits), the proxy's decision lines are read from its
 * container log through the engine itself (as `logs` does) and turned into an allowHosts policy
 * by the egress proxy's own report (proxy/report), printed on stdout; the sandbox is destroyed on
 * every way out.
 */
import { AllowlistReport } from '../../proxy/report/index.js';
import type { DockerEngine } from '../docker/index.js';
import { SandboxError, checkSandboxSpec, namesFor, type SandboxHandle, type SandboxProvider, type SandboxSpec } from '../spec/index.js';
import { LineSplitter } from './log-lines.js';
import { readLogs } from './logs-command.js';
import { runExecCommand, type ExecCommandArgs, type ExecCommandIo } from './exec-command.js';

export interface ReportRunDeps {
  /** A provider whose egress proxies are in report mode. */
  readonly provider: SandboxProvider;
  /** Per-name calls (through the socket proxy, or the engine). */
  readonly engine: Pick<DockerEngine, 'inspectContainer'>;
  /** The engine itself: the socket proxy admits no log route. */
  readonly logEngine: Pick<DockerEngine, 'readLogs'>;
  readonly progress: (line: string) => void;
}

/** Makes the sandbox for the run; refuses a name that is taken (by a sandbox or what is left of one). */
async function createReportSandbox(deps: ReportRunDeps, spec: SandboxSpec, name: string): Promise<SandboxHandle> {
  checkSandboxSpec(spec);
  const names = namesFor(name);
  if ((await deps.engine.inspectContainer(names.container)) !== undefined || (await deps.engine.inspectContainer(names.egress)) !== undefined) {
    throw new SandboxError('invalid_spec', `${name} exists: run --report makes a sandbox for the run, so that no existing sandbox's egress proxy is ever switched to report mode; choose another name, or destroy it first (capybara-sandbox destroy ${name}).`);
  }
  deps.progress(`creating ${name} for a report run: its egress proxy allows what only the allowlist would refuse, and logs it would_deny`);
  return deps.provider.create(spec);
}

/**
 * The policy the run needed, from the log of the sandbox's (stopped) egress proxy. Every line is
 * hostile text written by a process the workload talked to: the report checks each one, and a
 * line past the splitter's cap is counted as malformed, never gathered. Only stdout is read: the
 * proxy's decision lines are pino's there, each value JSON-escaped; stderr has its raw text (a
 * fatal error's stack, which quotes a message with its line breaks), where a line could be made to
 * look like a decision.
 */
async function learnedPolicy(deps: ReportRunDeps, name: string): Promise<string> {
  const report = new AllowlistReport();
  const stdout = new LineSplitter((line) => report.add(line), () => report.tooLong());
  const onOutput = (stream: 'stdout' | 'stderr', chunk: Buffer): void => {
    if (stream === 'stdout') stdout.push(chunk);
  };
  const read = await readLogs(deps.logEngine, namesFor(name).egress, { follow: false, onOutput });
  await read.finished;
  stdout.flush();
  const counts = report.counts;
  deps.progress(`report of ${name}: ${counts.decisions} decisions read${counts.malformed > 0 ? `, ${counts.malformed} malformed line(s) skipped` : ''}`);
  return report.render(`sandbox ${name} (capybara-sandbox run --report)`);
}

/**
 * After the command: stops the sandbox (so the proxy's last lines are written), reads the policy,
 * and destroys the sandbox whatever happened.
 */
async function finishReportRun(deps: ReportRunDeps, handle: SandboxHandle): Promise<string> {
  try {
    await deps.provider.suspend(handle);
    return await learnedPolicy(deps, handle.id);
  } finally {
    await deps.provider.destroy(handle);
    deps.progress(`${handle.id} destroyed (--report)`);
  }
}

export interface ReportRunRequest {
  readonly name: string;
  readonly spec: SandboxSpec;
  /** The command line, as `bash -c` runs it. */
  readonly command: string;
  readonly exec: ExecCommandArgs;
}

/** The command's output on stderr: stdout carries the policy only, so `> allow.yaml` works. */
function toStderr(io: ExecCommandIo): ExecCommandIo {
  const t = io.terminal;
  return { stdout: io.stderr, stderr: io.stderr, terminal: t === undefined ? undefined : { stdin: t.stdin, stdout: t.stderr, stderr: t.stderr } };
}

/**
 * The whole of run --report: the sandbox made, the command run (its exit code is the result),
 * the policy printed on stdout, the sandbox destroyed on every way out.
 */
export async function reportRun(deps: ReportRunDeps, request: ReportRunRequest, io: ExecCommandIo): Promise<number> {
  const handle = await createReportSandbox(deps, request.spec, request.name);
  let code: number;
  try {
    code = await runExecCommand((opts) => deps.provider.exec(handle, request.command, opts), request.exec, toStderr(io));
  } catch (err) {
    await deps.provider.destroy(handle);
    deps.progress(`${handle.id} destroyed (--report)`);
    throw err;
  }
  io.stdout(await finishReportRun(deps, handle));
  return code;
}
