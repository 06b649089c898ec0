/**
 * How the controller tells "the sandbox had no room to start the command" from the command's
 * own result. A command that leaves the sandbox at its process limit (a self-backgrounding fork
 * bomb returns at once, exit 0, and keeps every pid taken) must not make the next command look
 * as if it had failed: either the controller's script saw the limit before starting anything
 * (exec-script.ts ROOM_CHECK), or Docker itself could not start the exec ("OCI runtime exec
 * failed", written into the output stream with an exit code of 126 or so).
 */
import { SANDBOX_FULL_EXIT, SANDBOX_FULL_MARKER } from './exec-script.js';

type StartFailure =
  | { readonly kind: 'full'; readonly detail: string }
  | { readonly kind: 'runtime'; readonly detail: string };

/**
 * Docker writes a failed exec start as one stdout line ending in CRLF, and nothing on stderr. A
 * command's exec wrapper writes STARTED_BYTE to stderr before the command runs, so commands.ts
 * asks only when that byte is missing; a file script's output is read only when it failed.
 */
const RUNTIME_FAILURE = /^(OCI runtime exec failed[^\r\n]*)\r\n$/;

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
    return /resource temporarily unavailable|read init-p: connection reset by peer/i.test(detail) ? { kind: 'full', detail } : { kind: 'runtime', detail };
  }
  return undefined;
}
