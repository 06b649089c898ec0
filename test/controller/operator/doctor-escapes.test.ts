/**
 * doctor prints what its throwaway sandbox's commands wrote (the probe's stderr, what `ls` found,
 * curl's answer) in its check details. Those commands are the image's own programs: an image made
 * to be hostile (doctor --image, to check a tenant's image) wrote terminal controls that reached
 * the operator's terminal raw, and forged whole [PASS] lines with a newline (review finding).
 * Real engine; the image's python3 answers at once, so the probe contacts nothing.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { engineSocketPath, TEST_LABEL } from '../../support/docker.js';
import { fileNeeds } from '../../support/needs.js';
import { runOperator } from '../../../controller/operator/index.js';

await fileNeeds(t, 'engine');

const imageTag = (runId: string): string => `capybara-sandbox-doctor-escapes-test:${runId}`;

t.test('doctor shows a hostile image\'s output escaped: no terminal control, no forged line', async (t) => {
  const s = await sandboxTestEnv(t, (runId) => [imageTag(runId)]);
  if (!s) return;
  const { env } = s;
  const image = imageTag(env.runId);
  // What the probe's python3 writes: a window title, a cleared line and a forged check line.
  const hostile = String.raw`printf '\033]0;owned\007\033[2K\r\n[PASS] isolation: forged\n\302\233' >&2; exit 1`;
  const dockerfile = [
    `FROM ${SANDBOX_IMAGE}`,
    'USER root',
    `RUN printf '%s\\n' '#!/bin/sh' ${JSON.stringify(hostile)} > /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3`,
    ...Object.entries(env.labels).map(([k, v]) => `LABEL ${k}=${v}`),
  ].join('\n');
  execFileSync('docker', ['build', '--quiet', '--pull=false', '--network=none', '-t', image, '-'], { input: dockerfile, stdio: ['pipe', 'ignore', 'pipe'], env: { ...process.env, DOCKER_BUILDKIT: '0' } });
  t.teardown(() => env.docker.getImage(image).remove({ force: true }).catch(() => undefined));

  let stdout = '';
  const code = await runOperator(['--endpoint', `unix://${engineSocketPath()}`, '--network', s.sharedNetwork, '--label', `${TEST_LABEL}=${env.runId}`, '--image', image, 'doctor'], {
    stdout: (text) => { stdout += text; },
    stderr: () => undefined,
  });
  t.equal(code, 1, 'doctor fails');
  t.match(stdout, /^\[FAIL\] isolation: the probe did not run \(exit 1; the image needs python3\): /m, 'the probe\'s failure is said');
  t.notOk(/[\x00-\x09\x0b-\x1f\x7f-\x9f]/.test(stdout), `no control character reaches the terminal: ${JSON.stringify(stdout)}`);
  t.notMatch(stdout, /^\[PASS\] isolation: forged/m, 'and no line is forged');
  t.match(stdout, /\\x1b\]0;owned\\x07/, 'the controls are shown escaped');
});
