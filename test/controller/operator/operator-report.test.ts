/**
 * `capybara-sandbox run --report` against the real engine: the sandbox is made through the real
 * socket proxy with its egress proxy in report mode (EGRESS_MODE=report admitted by the socket
 * proxy), the command reaches a host that is on no allowlist (the test's upstream, pinned as the
 * controller tests pin it), its output goes to stderr, the policy it needed (read from the proxy's
 * container log through the engine itself) to stdout, and nothing of the sandbox is left.
 */
import t from 'tap';
import { sandboxTestEnv, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { engineSocketPath, TEST_LABEL } from '../../support/docker.js';
import { fileNeeds } from '../../support/needs.js';
import { parsePolicyText } from '../../../policy/index.js';
import { runOperator } from '../../../controller/operator/index.js';

await fileNeeds(t, 'engine');

t.test('run --report learns the allowlist a command needed, in one run', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env } = s;
  const name = `cap-${env.runId}-learn`;
  let stdout = '';
  let stderr = '';
  const code = await runOperator(
    ['--endpoint', s.proxy.endpoint, '--network', s.sharedNetwork, '--label', `${TEST_LABEL}=${env.runId}`, 'run', name, '--report', '--',
      `curl -sS http://${UPSTREAM_HOST}/ && echo && curl -sS -o /dev/null -w '%{http_code}\\n' http://${UPSTREAM_HOST}/?again; exit 3`],
    {
      stdout: (x) => { stdout += x; },
      stderr: (x) => { stderr += x; },
      env: { ...process.env, DOCKER_HOST: `unix://${engineSocketPath()}`, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ [UPSTREAM_HOST]: s.upstreamIp }) },
    },
  );
  t.equal(code, 3, `the command's exit code (stderr: ${stderr})`);
  t.match(stderr, UPSTREAM_BODY, 'the command reached a host off the allowlist, its output on stderr');
  t.match(stderr, /^200$/m);
  t.notMatch(stdout, UPSTREAM_BODY, 'stdout is the policy alone');
  const file = parsePolicyText(stdout, 'the report');
  t.same(file.allowHosts, [UPSTREAM_HOST], 'the host it needed');
  t.match(stdout, new RegExp(`- "${UPSTREAM_HOST.replace(/\./g, '\\.')}" # 2 requests; 2 would_deny; port 80`));
  t.match(stderr, new RegExp(`${name} destroyed \\(--report\\)`));
  t.same(await s.labelled(name), [], 'the sandbox, its proxy, network and volumes are gone');

  await t.test('an existing sandbox is refused, its proxy left enforcing', async (t) => {
    const keep = `cap-${env.runId}-keep`;
    await s.provider.create({ id: `${env.runId}-keep`, image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', allowHosts: [] } });
    let err = '';
    const again = await runOperator(['--endpoint', s.proxy.endpoint, '--network', s.sharedNetwork, 'run', keep, '--report', '--', 'true'], { stdout: () => undefined, stderr: (x) => { err += x; } });
    t.equal(again, 1);
    t.match(err, /exists: run --report makes a sandbox for the run/);
    const egress = await s.inspect(`${keep}-egress`);
    t.notOk((egress.Config.Env ?? []).some((e) => e.startsWith('EGRESS_MODE=')), 'never switched to report mode');
    await s.provider.destroy({ id: keep });
  });
});
