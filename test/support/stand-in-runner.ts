/**
 * The command runner (controller/exec/commands.ts) on a stand-in engine: the test's `startExec`
 * plays each exec, the container always runs, the log is silent. For the runner's own logic
 * (streams, waits, kills) without a real engine.
 */
import pino from 'pino';
import type { ExecRequest, ExecRun } from '../../controller/docker/engine.js';
import type { SandboxEngine } from '../../controller/docker/index.js';
import { CommandRunner } from '../../controller/exec/commands.js';
import { EXEC_MARK_VAR } from '../../controller/exec/exec-script.js';

export interface StandInOptions {
  readonly execTimeoutMs?: number;
  readonly outputBytes?: number;
  /** A container restart (a kill that did not confirm); nothing by default. */
  readonly restart?: (name: string) => Promise<void>;
}

export function standInRunner(startExec: (container: string, request: ExecRequest) => Promise<ExecRun>, options: StandInOptions = {}): CommandRunner {
  const engine = {
    startExec,
    async inspectContainer() {
      return { running: true, status: 'running' };
    },
  } as unknown as SandboxEngine;
  return new CommandRunner({
    engine,
    withRunning: (_name, fn) => fn(),
    restart: options.restart ?? (async () => undefined),
    logger: pino({ level: 'silent' }),
    ceilings: { execTimeoutMs: options.execTimeoutMs ?? 60_000, outputBytes: options.outputBytes ?? 1024 },
    isolation: 'landlock',
  });
}

/** Whether an exec is a command's (it carries the mark), not one of the kill scripts. */
export function isCommand(request: ExecRequest): boolean {
  return request.env?.some((e) => e.startsWith(`${EXEC_MARK_VAR}=`)) === true;
}
