/** Telling "the command did not start" from the command's own result (sandbox-full.ts). */
import t from 'tap';
import { commandStartFailure, startFailure } from '../../../controller/exec/sandbox-full.js';
import {
  KILL_OK_MARKER,
  MAX_COMMAND_SCRIPT_BYTES,
  SANDBOX_FULL_EXIT,
  SANDBOX_FULL_MARKER,
  STARTED_BYTE,
  WRAPPER_FAILED_EXIT,
  WRAPPER_FAILED_MARKER,
} from '../../../controller/exec/exec-script.js';
import type { ExecRequest } from '../../../controller/docker/engine.js';
import type { ExecOutcome } from '../../support/fake-engine.js';
import { fakeSandbox } from '../../support/fake-sandbox.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

const START = String.fromCharCode(STARTED_BYTE);

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

let caseId = 0;
/** A fake sandbox whose commands answer `command`; kills, by mark or of everything, confirm. */
async function startCase(id: string, command: (request: ExecRequest, killed: Promise<void>) => ExecOutcome | Promise<ExecOutcome>) {
  const s = fakeSandbox();
  const h = await s.provider.create({ id, image: 'capybara-sandbox:latest', limits: { egress: 'none' } });
  const seen: string[] = [];
  let onKill = (): void => undefined;
  const killed = new Promise<void>((resolve) => {
    onKill = resolve;
  });
  s.engine.onExec = (container, request) => {
    const name = String(request.cmd[3]);
    seen.push(name);
    if (name === 'capybara-exec') return command(request, killed);
    if (name === 'capybara-kill' || name === 'capybara-killall') {
      onKill();
      return { exitCode: 0, stdout: `${KILL_OK_MARKER}\n` };
    }
    return s.engine.defaultExec(container, request);
  };
  return { s, h, seen };
}

t.test('what the wrapper prints before the start byte is never part of the result', async (t) => {
  const warning = 'bash: warning: setlocale: LC_ALL: cannot change locale (en_US.UTF-8)\n';
  const { s, h } = await startCase('prestart', () => ({ exitCode: 4, stdout: 'out\n', stderr: `${warning}${START}${warning}own\n` }));
  t.same(await s.provider.exec(h, 'true'), { exitCode: 4, stdout: 'out\n', stderr: `${warning}own\n`, truncated: false, timedOut: false, aborted: false },
    'the command ran: its status and its own stderr (its own shell\'s warning included), without the wrapper\'s');
});

t.test('a timeout that comes before the command began: sandbox_full when a fork found no room, never timedOut', async (t) => {
  for (const said of ['capybara-exec: fork: retry: Resource temporarily unavailable\n', `${SANDBOX_FULL_MARKER} 1024/1024\n`]) {
    const { s, h, seen } = await startCase(`late-full-${caseId++}`, (request) => {
      // Said at once, and then the wrapper hangs in its fork retries.
      request.onOutput('stderr', Buffer.from(said));
      return new Promise<ExecOutcome>(() => undefined);
    });
    const restarts = s.engine.count('restartContainer');
    const err = await s.provider.exec(h, 'echo hi', { timeoutMs: 200 }).then((r) => r, (e: unknown) => e);
    t.ok(isSandboxError(err, 'sandbox_full'), String(err));
    t.match(String(err), /had not begun when its timeout of 200 ms ran out.*restarted/);
    t.notMatch(String(err), /capybara-sandbox-full/, 'the controller\'s marker is not in the message');
    t.same(seen, ['capybara-exec'], 'no kill that would need room of its own, and no second try: the time is spent');
    t.equal(s.engine.count('restartContainer') - restarts, 1, 'the container restarted once, for the next call');
    t.match(s.logs, [{ event: 'container_restart', cause: 'sandbox_full' }]);
  }
});

t.test('a timeout that comes before the command began for no known reason: exec_failed', async (t) => {
  const { s, h } = await startCase('late-slow', async (_request, killed) => {
    await killed;
    return { exitCode: 137 };
  });
  const err = await s.provider.exec(h, 'echo hi', { timeoutMs: 200 }).then((r) => r, (e: unknown) => e);
  t.ok(isSandboxError(err, 'exec_failed'), String(err));
  t.match(String(err), /had not begun when its timeout of 200 ms ran out\.?$/m);
});

t.test('an abort before the command began is the caller\'s result, with nothing of the wrapper in it', async (t) => {
  const ac = new AbortController();
  const { s, h } = await startCase('abort-early', async (_request, killed) => {
    await killed;
    return { exitCode: 137, stderr: 'bash: fork: retry: Resource temporarily unavailable\n' };
  });
  setTimeout(() => ac.abort(), 100);
  t.same(await s.provider.exec(h, 'echo hi', { signal: ac.signal }), { exitCode: null, stdout: '', stderr: '', truncated: false, timedOut: false, aborted: true });
});

t.test('a command that could not be put in its Landlock domain did not run, and the error says what to do', async (t) => {
  const { s, h } = await startCase('nolandlock', () => ({ exitCode: 1, stderr: "setpriv: unrecognized option '--landlock-access'\nTry 'setpriv --help' for more information.\n" }));
  const err = await s.provider.exec(h, 'echo hi').then((r) => r, (e: unknown) => e);
  t.ok(isSandboxError(err, 'exec_failed'), String(err));
  t.match(String(err), /Landlock domain of its own \(setpriv: unrecognized option '--landlock-access'\)/);
  t.match(String(err), /util-linux 2\.40 or later/);
  t.match(String(err), /commandIsolation to "off"/);
});

t.test('a command longer than one argument may be is refused before any exec, with the limit', async (t) => {
  const { s, h, seen } = await startCase('toolong', () => ({ exitCode: 0, stderr: START }));
  const at = MAX_COMMAND_SCRIPT_BYTES;
  t.equal((await s.provider.exec(h, 'x'.repeat(at))).exitCode, 0, 'the longest command runs');
  const err = await s.provider.exec(h, 'x'.repeat(at - 10), { env: { LONG: 'y'.repeat(20) } }).then((r) => r, (e: unknown) => e);
  t.ok(isSandboxError(err, 'invalid_spec'), String(err));
  t.match(String(err), new RegExp(`the limit is ${at} .*Argument list too long.*writeFile`));
  t.same(seen, ['capybara-exec'], 'no exec for the refused one');
});
