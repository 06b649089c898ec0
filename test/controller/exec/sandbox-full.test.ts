/** Telling "the command did not start" from the command's own result (sandbox-full.ts). */
import t from 'tap';
import { commandStartFailure, startFailure } from '../../../controller/exec/sandbox-full.js';
import { SANDBOX_FULL_EXIT, SANDBOX_FULL_MARKER, WRAPPER_FAILED_EXIT, WRAPPER_FAILED_MARKER } from '../../../controller/exec/exec-script.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

const rows: { name: string; exitCode: number | null; stdout: string; stderr: string; want: string | undefined }[] = [
  { name: 'the room check refused to start', exitCode: SANDBOX_FULL_EXIT, stdout: '', stderr: `${SANDBOX_FULL_MARKER} 1020/1024\n`, want: 'full' },
  { name: 'Docker could not fork the exec', exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: resource temporarily unavailable\r\n', stderr: '', want: 'full' },
  { name: 'the exec init died before reporting back (runc, pids limit reached)', exitCode: 126, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: unknown\r\n', stderr: '', want: 'full' },
  { name: 'Docker refused the exec for another reason', exitCode: 127, stdout: 'OCI runtime exec failed: exec failed: unable to start container process: exec: "bash": executable file not found in $PATH: unknown\r\n', stderr: '', want: 'failed' },
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

// A command's exec without the start byte: whatever its status, the command never began.
const commandRows: { name: string; exitCode: number | null; stdout: string; stderr: string; want: [string, RegExp] }[] = [
  { name: 'the wrapper says why', exitCode: WRAPPER_FAILED_EXIT, stdout: '', stderr: `${WRAPPER_FAILED_MARKER}: the command arrived incomplete on stdin\n`, want: ['failed', /^the command arrived incomplete on stdin$/] },
  // What the old wrapper returned as the command's result with /tmp full.
  { name: 'exit 125 with a write error', exitCode: 125, stdout: '', stderr: 'capybara-session: line 2: printf: write error: No space left on device\n', want: ['failed', /exit status 125 before the command began \(.*No space left on device\)/] },
  { name: 'exit 0 and nothing said', exitCode: 0, stdout: '', stderr: '', want: ['failed', /exit status 0 before the command began$/] },
  { name: 'a fork that found the pids limit', exitCode: 254, stdout: '', stderr: 'bash: fork: retry: Resource temporarily unavailable\n', want: ['full', /Resource temporarily unavailable/] },
  { name: 'the room check', exitCode: SANDBOX_FULL_EXIT, stdout: '', stderr: `${SANDBOX_FULL_MARKER} 1020/1024\n`, want: ['full', /1020\/1024/] },
];
for (const row of commandRows) {
  t.test(`a command that did not start: ${row.name}`, async (t) => {
    const f = commandStartFailure(row.exitCode, row.stdout, row.stderr);
    t.equal(f.kind, row.want[0]);
    t.match(f.detail, row.want[1]);
  });
}

t.test('an exec that ended before its command began is an error, never a result', async (t) => {
  const s = fakeSandbox();
  const h = await s.provider.create({ id: 'nostart', image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  for (const outcome of [
    { exitCode: 125, stderr: 'capybara-session: line 2: printf: write error: No space left on device\n' },
    { exitCode: 0 },
    { exitCode: 137 },
  ]) {
    s.engine.onExec = () => outcome;
    const err = await s.provider.exec(h, 'echo hi').then((r) => r, (e: unknown) => e);
    t.ok(isSandboxError(err, 'exec_failed'), `exit ${outcome.exitCode} without the start byte: ${err instanceof Error ? err.message : JSON.stringify(err)}`);
  }
});
