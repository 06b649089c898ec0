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

/** `full`: no room for processes (free the sandbox and try again); `failed`: any other cause. */
export type StartFailure =
  | { readonly kind: 'full'; readonly detail: string }
  | { readonly kind: 'failed'; readonly detail: string };

/**
 * Docker writes a failed exec start as one stdout line ending in CRLF, and nothing on stderr. A
 * command's shell writes STARTED_BYTE to stderr before the command runs, so commands.ts asks only
 * when that byte is missing; a file script's output is read only when it failed.
 */
const RUNTIME_FAILURE = /^(OCI runtime exec failed[^\r\n]*)\r\n$/;
/** What bash and coreutils print when a fork or exec finds the pids limit reached. */
const NO_PROCESS_ROOM = /resource temporarily unavailable/i;

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
  const wrapper = exitCode === WRAPPER_FAILED_EXIT ? stderr.split('\n').find((line) => line.startsWith(`${WRAPPER_FAILED_MARKER}: `)) : undefined;
  if (wrapper !== undefined) return { kind: 'failed', detail: wrapper.slice(WRAPPER_FAILED_MARKER.length + 2) };
  return { kind: 'failed', detail: `the exec wrapper ended with exit status ${String(exitCode)} before the command began${text === '' ? '' : ` (${text})`}` };
}
