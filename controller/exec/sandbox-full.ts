/**
 * How the controller tells "the command did not start" from the command's own result. A command
 * that leaves the sandbox at its process limit (a self-backgrounding fork bomb returns at once,
 * exit 0, and keeps every pid taken) must not make the next command look as if it had failed:
 * either the controller's script saw the limit before starting anything (exec-script.ts
 * ROOM_CHECK), or Docker itself could not start the exec ("OCI runtime exec failed", written into
 * the output stream with an exit code of 126 or so). And the exec wrapper's own failures are
 * never the command's exit status: a command that did not print the start byte did not begin.
 */
import { SANDBOX_FULL_EXIT, SANDBOX_FULL_MARKER, WRAPPER_FAILED_EXIT, WRAPPER_FAILED_MARKER } from './exec-script.js';

/**
 * `full`: no room for processes (free the sandbox and try again); `failed`: any other cause.
 * `late`: the attempt's time ran out before the command began, so there is none left to retry.
 */
export type StartFailure =
  | { readonly kind: 'full'; readonly detail: string; readonly late?: boolean }
  | { readonly kind: 'failed'; readonly detail: string; readonly late?: boolean };

/**
 * Docker writes a failed exec start as one stdout line ending in CRLF, and nothing on stderr. A
 * command's shell writes STARTED_BYTE to stderr before the command runs, so commands.ts asks only
 * when that byte is missing; a file script's output is read only when it failed.
 */
const RUNTIME_FAILURE = /^(OCI runtime exec failed[^\r\n]*)\r\n$/;
/** What bash and coreutils print when a fork or exec finds the pids limit reached. */
const NO_PROCESS_ROOM = /resource temporarily unavailable|fork system call failed|fork: retry/i;
/** setpriv's own errors, when it could not put the command in its Landlock domain. */
const ISOLATION_FAILURE = /^setpriv: .*$/m;

export function startFailure(exitCode: number | null, stdout: string, stderr: string): StartFailure | undefined {
  if (exitCode === SANDBOX_FULL_EXIT && stderr.startsWith(SANDBOX_FULL_MARKER)) {
    return { kind: 'full', detail: `${stderr.slice(SANDBOX_FULL_MARKER.length).trim()} processes` };
  }
  const runtime = stderr === '' ? RUNTIME_FAILURE.exec(stdout) : null;
  if (runtime !== null) {
    const detail = runtime[1] ?? '';
    // The process limit again, as runc reports it: EAGAIN from its own fork, or the exec's init
    // process dying before it could report back ("read init-p: connection reset by peer"), which
    // is what a failed fork inside the pids cgroup looks like from outside (seen in the
    // pids-limit test on this engine).
    return NO_PROCESS_ROOM.test(detail) || /read init-p: connection reset by peer/i.test(detail) ? { kind: 'full', detail } : { kind: 'failed', detail };
  }
  return undefined;
}

/**
 * Why a command's exec ended without its start byte: never undefined, since whatever its exit
 * status was, the command did not begin. The wrapper says why when it can (WRAPPER_FAILED_MARKER);
 * a fork that found no room is `full` whoever reported it.
 */
export function commandStartFailure(exitCode: number | null, stdout: string, stderr: string): StartFailure {
  const known = startFailure(exitCode, stdout, stderr);
  if (known !== undefined) return known;
  const text = (stderr.trim() || stdout.trim()).slice(0, 500);
  if (NO_PROCESS_ROOM.test(text)) return { kind: 'full', detail: text };
  const isolation = ISOLATION_FAILURE.exec(text);
  if (isolation !== null) {
    return {
      kind: 'failed',
      detail: `it could not be put in a Landlock domain of its own (${isolation[0]}). Commands are kept apart with Landlock: the engine's kernel needs it (Linux 5.13 or later, with landlock among its LSMs) and the image util-linux 2.40 or later (setpriv --landlock-access). Use such an image, or set commandIsolation to "off" in the deployment config (docs/controller.md says what that gives up)`,
    };
  }
  const wrapper = exitCode === WRAPPER_FAILED_EXIT ? stderr.split('\n').find((line) => line.startsWith(`${WRAPPER_FAILED_MARKER}: `)) : undefined;
  if (wrapper !== undefined) return { kind: 'failed', detail: wrapper.slice(WRAPPER_FAILED_MARKER.length + 2) };
  return { kind: 'failed', detail: `the exec wrapper ended with exit status ${String(exitCode)} before the command began${text === '' ? '' : ` (${text})`}` };
}

/**
 * Why a command whose timeout came before it began did not begin: the wrapper's fork that found
 * no room (bash retries for about 15 s before it gives up), or a start that was merely slow.
 * Never the command's timeout, since the command never ran.
 */
export function lateStartFailure(timeoutMs: number, preStart: string): StartFailure {
  const late = `it had not begun when its timeout of ${timeoutMs} ms ran out`;
  if (preStart.startsWith(SANDBOX_FULL_MARKER)) {
    return { kind: 'full', detail: `${late}: the sandbox was at its process limit (${preStart.slice(SANDBOX_FULL_MARKER.length).trim()} processes)`, late: true };
  }
  const text = preStart.trim().slice(0, 500);
  const detail = `${late}${text === '' ? '' : ` (${text})`}`;
  return NO_PROCESS_ROOM.test(text) ? { kind: 'full', detail, late: true } : { kind: 'failed', detail, late: true };
}
