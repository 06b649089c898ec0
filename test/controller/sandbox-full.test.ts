/** Telling "no room to start the command" from the command's own result (sandbox-full.ts). */
import t from 'tap';
import { startFailure } from '../../controller/exec/sandbox-full.js';
import { SANDBOX_FULL_EXIT, SANDBOX_FULL_MARKER } from '../../controller/exec/exec-script.js';

const rows: { name: string; exitCode: number | null; stdout: string; stderr: string; want: string | undefined }[] = [
  { name: 'the room check refused to start', exitCode: SANDBOX_FULL_EXIT, stdout: '', stderr: `${SANDBOX_FULL_MARKER} 1020/1024\n`, want: 'full' },
  { name: 'Docker could not fork the exec', exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: resource temporarily unavailable\r\n', stderr: '', want: 'full' },
  { name: 'the exec init died before reporting back (runc, pids limit reached)', exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: unknown\r\n', stderr: '', want: 'full' },
  { name: 'Docker refused the exec for another reason', exitCode: 127, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: exec: "bash": executable file not found in $PATH: unknown\r\n', stderr: '', want: 'runtime' },
  { name: 'the command exited 190 itself', exitCode: SANDBOX_FULL_EXIT, stdout: '', stderr: 'my own error\n', want: undefined },
  { name: 'the command printed the marker but exited 0', exitCode: 0, stdout: '', stderr: `${SANDBOX_FULL_MARKER} 1/2\n`, want: undefined },
  { name: 'the command printed the runtime text among other output', exitCode: 126, stdout: 'x\nOCI runtime exec failed: resource temporarily unavailable\r\n', stderr: '', want: undefined },
  { name: 'the runtime text with stderr beside it is the command', exitCode: 126, stdout: 'OCI runtime exec failed: y\r\n', stderr: 'e', want: undefined },
  { name: 'an ordinary failure', exitCode: 1, stdout: '', stderr: 'fork: retry: Resource temporarily unavailable\n', want: undefined },
];
for (const row of rows) {
  t.test(row.name, async (t) => {
    t.equal(startFailure(row.exitCode, row.stdout, row.stderr)?.kind, row.want);
  });
}
