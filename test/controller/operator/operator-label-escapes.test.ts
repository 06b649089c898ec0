/**
 * gc, ls and down --all print what a listing's labels say (a sandbox's name label), and dockerd merges
 * an image's labels into its container's: any container of an image that carries the sandbox
 * labels is listed as a sandbox's leftover, its name label whatever bytes the image's author
 * chose. Printed raw, a terminal control in it reached the root operator's terminal. Such a name
 * label, no sandbox name, is not the controller's: down --all leaves what carries it alone.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import Docker from 'dockerode';
import { engineSocketPath, TEST_LABEL } from '../../support/docker.js';
import { SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { runOperator } from '../../../controller/operator/index.js';
import { fileNeeds } from '../../support/needs.js';

await fileNeeds(t, 'engine');

async function op(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runOperator(argv, { stdout: (s) => { stdout += s; }, stderr: (s) => { stderr += s; } });
  return { code, stdout, stderr };
}

t.test('gc, ls and down --all escape the label values they print', async (t) => {
  const docker = new Docker({ socketPath: engineSocketPath() });
  if (!(await docker.getImage(SANDBOX_IMAGE).inspect().then(() => true, () => false))) {
    t.comment(`skipped: image ${SANDBOX_IMAGE} is missing`);
    return;
  }
  const runId = `tr2${randomBytes(4).toString('hex')}`;
  const name = `cap-tr2-${runId}`;
  // OSC 0 (set the window title) and a CSI that clears the screen, as an image's LABEL would carry them.
  const hostile = `cap-tr2-\x1b]0;owned\x07\x1b[2J\x9b31m`;
  const created = await docker.createContainer({
    name,
    Image: SANDBOX_IMAGE,
    Cmd: ['true'],
    Labels: { [TEST_LABEL]: runId, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': hostile },
    HostConfig: { NetworkMode: 'none' },
  });
  t.teardown(() => created.remove({ force: true }).catch(() => undefined));
  const engine = ['--endpoint', `unix://${engineSocketPath()}`, '--label', `${TEST_LABEL}=${runId}`];

  const gc = await op([...engine, 'gc', '--dry-run', '--min-age', '0']);
  t.equal(gc.code, 0, gc.stderr);
  t.match(gc.stdout, name, 'the container is listed');
  t.notMatch(gc.stdout, /[\x1b\x07\x9b]/, 'no control character reaches the terminal from gc');
  t.match(gc.stdout, '\\u001b]0;owned', 'the label is shown escaped');

  // A container whose name label is its own name is listed by ls as a sandbox, its TIER a label.
  const tiered = await docker.createContainer({
    name: `${name}-ls`,
    Image: SANDBOX_IMAGE,
    Cmd: ['true'],
    Labels: { [TEST_LABEL]: runId, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': `${name}-ls`, 'dev.capybara.sandbox.egress': '\x1b]0;owned\x07' },
    HostConfig: { NetworkMode: 'none' },
  });
  t.teardown(() => tiered.remove({ force: true }).catch(() => undefined));
  const ls = await op([...engine, 'ls']);
  t.equal(ls.code, 0, ls.stderr);
  t.match(ls.stdout, `${name}-ls`, 'the container is listed');
  t.notMatch(ls.stdout, /[\x1b\x07\x9b]/, 'no control character reaches the terminal from ls');

  const down = await op([...engine, '--network', `cap-tr2-${runId}-net`, '--proxy-name', `tr2-${runId}-proxy`, '--socket-dir', `/run/cap-tr2-${runId}`, 'down', '--all']);
  t.notMatch(down.stdout + down.stderr, /[\x1b\x07\x9b]/, 'no control character reaches the terminal from down --all');
  // A name label that is no sandbox name is not the controller's: left alone and named, and it
  // does not fail the rest of down --all (it did: destroy refused the name, and down stopped there).
  t.equal(down.code, 0, down.stderr);
  t.match(down.stdout, /^left alone: what carries the name label "cap-tr2-\\u001b\]0;owned/m, 'named as left alone');
  t.notMatch(down.stdout, /NOT destroyed/, 'not a failed destroy');
});
