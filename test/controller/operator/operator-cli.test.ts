/**
 * The operator CLI (`capybara-sandbox`) against the real engine and the real socket proxy.
 * Runs in-process through runOperator (the bin is a two-line wrapper; one case runs the built
 * bin). ls and gc are always narrowed to this run's test label, so they never see (or remove)
 * what other tests on the same engine are creating.
 */
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sandboxTestEnv, SANDBOX_IMAGE, UPSTREAM_BODY, UPSTREAM_HOST } from '../../support/sandbox-env.js';
import { engineSocketPath, TEST_LABEL } from '../../support/docker.js';
import { needUnmet } from '../../support/needs.js';
import { runOperator } from '../../../controller/operator/index.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));

/** `writes`: each stdout write with when it came, to see what is printed as it happens. */
async function op(argv: string[]): Promise<{ code: number; stdout: string; stderr: string; writes: Array<{ at: number; text: string }> }> {
  let stdout = '';
  let stderr = '';
  const writes: Array<{ at: number; text: string }> = [];
  const code = await runOperator(argv, { stdout: (s) => { stdout += s; writes.push({ at: Date.now(), text: s }); }, stderr: (s) => { stderr += s; } });
  return { code, stdout, stderr, writes };
}

t.test('usage and config errors (no engine needed)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cap-opcfg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'unknown-key.json'), JSON.stringify({ endpoint: 'unix:///nonexistent.sock', endpiont: 'x' }));
  writeFileSync(join(dir, 'bad-json.json'), '{ "endpoint": ');
  writeFileSync(join(dir, 'bad-endpoint.json'), JSON.stringify({ endpoint: 'http://proxy:2375' }));
  const rows = [
    { name: 'no command', argv: [], code: 2, err: /a command is required/ },
    { name: 'unknown command', argv: ['--endpoint', 'unix:///x.sock', 'list'], code: 2, err: /unknown command "list"/ },
    { name: 'unknown option', argv: ['--endpoint', 'unix:///x.sock', 'ls', '--all'], code: 2, err: /--all/ },
    { name: 'missing config file', argv: ['--config', join(dir, 'nope.json'), 'ls'], code: 2, err: /Cannot read config file/ },
    { name: 'config file not JSON', argv: ['--config', join(dir, 'bad-json.json'), 'ls'], code: 2, err: /not valid JSON/ },
    { name: 'unknown key in config file', argv: ['--config', join(dir, 'unknown-key.json'), 'ls'], code: 2, err: /unknown-key\.json.*unknown key "endpiont"/ },
    { name: 'bad endpoint in config file', argv: ['--config', join(dir, 'bad-endpoint.json'), 'ls'], code: 2, err: /endpoint: must be tcp/ },
    { name: 'exec without --', argv: ['--endpoint', 'unix:///x.sock', 'exec', 'cap-x'], code: 2, err: /needs a command after --/ },
    { name: 'inspect without a name', argv: ['--endpoint', 'unix:///x.sock', 'inspect'], code: 2, err: /exactly one sandbox name/ },
    { name: 'allow without a host', argv: ['--endpoint', 'unix:///x.sock', 'allow', 'demo'], code: 2, err: /allow takes a sandbox name and at least one host/ },
    { name: 'deny without a name', argv: ['--endpoint', 'unix:///x.sock', 'deny'], code: 2, err: /deny takes a sandbox name and at least one host/ },
    { name: 'bad --min-age', argv: ['--endpoint', 'unix:///x.sock', 'gc', '--min-age', 'soon'], code: 2, err: /not a duration/ },
    { name: 'bad sandbox name: a usage error', argv: ['--endpoint', 'unix:///x.sock', 'inspect', 'web 1'], code: 2, err: /invalid_config: Sandbox name "cap-web 1" is not a sandbox resource name.*see capybara-sandbox --help/ },
    // Refused before anything is said or asked: no "creating", and no engine (none answers here).
    { name: 'a bad allowlist entry', argv: ['--endpoint', 'unix:///x.sock', 'run', 'demo', '--allow', '*', '--', 'true'], code: 2, err: /^capybara-sandbox: invalid_config: --allow: "\*" is not allowed/ },
  ];
  for (const row of rows) {
    const r = await op(row.argv);
    t.equal(r.code, row.code, `${row.name}: exit code`);
    t.match(r.stderr, row.err, `${row.name}: ${r.stderr.trim()}`);
  }
  const json = await op(['--json', '--endpoint', 'unix:///x.sock', 'ls', 'extra']);
  t.same(JSON.parse(json.stderr).error.code, 'invalid_config', '--json errors are JSON');
  const help = await op(['--help']);
  t.equal(help.code, 0);
  // Each command's own options are in its --help (operator-conventions.test.ts).
  for (const word of ['up', 'down', 'create', 'run', 'ls', 'inspect', 'exec', 'allow', 'deny', 'destroy', 'gc', 'doctor', '--json', '--config', '--socket-dir']) t.match(help.stdout, word);
});

t.test('the built bin prints help, and its version', async (t) => {
  if (!existsSync(join(root, 'dist/controller/operator/cli.js'))) return needUnmet(t, 'dist not built (npm run build)');
  const out = execFileSync(process.execPath, [join(root, 'dist/controller/operator/cli.js'), '--help'], { encoding: 'utf8' });
  t.match(out, /^capybara-sandbox: operator tool/);
  const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  t.equal(execFileSync(process.execPath, [join(root, 'dist/controller/operator/cli.js'), '--version'], { encoding: 'utf8' }), `capybara-sandbox ${version}\n`);
});

t.test('operator commands against the engine and the socket proxy', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env, provider } = s;
  const engine = ['--endpoint', `unix://${engineSocketPath()}`, '--label', `${TEST_LABEL}=${env.runId}`];
  const viaProxy = ['--endpoint', s.proxy.endpoint, '--network', s.sharedNetwork, '--label', `${TEST_LABEL}=${env.runId}`];
  const live = await provider.create({ id: `${env.runId}-live`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST] } });

  await t.test('ls', async (t) => {
    const json = await op([...engine, '--json', 'ls']);
    t.equal(json.code, 0, json.stderr);
    const rows = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
    t.same(rows.map((r) => [r.name, r.state, r.tier, r.egress, r.image]), [[live.id, 'running', 'allowlist', 'running', SANDBOX_IMAGE]]);
    const human = await op([...engine, 'ls']);
    t.match(human.stdout, /^NAME\s+STATE\s+TIER\s+AGE\s+IMAGE\s+EGRESS\n/);
    t.match(human.stdout, new RegExp(`${live.id}\\s+running\\s+allowlist\\s+\\d+s\\s+${SANDBOX_IMAGE}\\s+running`));
    const refused = await op([...viaProxy, 'ls']);
    t.equal(refused.code, 1);
    t.match(refused.stderr, /engine_refused: ls needs to list .* --endpoint unix:\/\/\/var\/run\/docker\.sock/);
  });

  await t.test('ls -q, --format and --filter', async (t) => {
    // A second sandbox, stopped, so that the status filter has two states to tell apart.
    const stopped = await provider.create({ id: `${env.runId}-stopped`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
    t.teardown(() => provider.destroy(stopped));
    await env.docker.getContainer(stopped.id).stop({ t: 0 });
    const names = async (...argv: string[]): Promise<string[]> => {
      const r = await op([...engine, 'ls', '-q', ...argv]);
      t.equal(r.code, 0, r.stderr);
      return r.stdout === '' ? [] : r.stdout.trimEnd().split('\n');
    };
    t.same(await names(), [live.id, stopped.id].sort(), '-q: the names, one a line');
    t.same(await names('--filter', 'status=running'), [live.id]);
    t.same(await names('--filter', 'status=exited'), [stopped.id]);
    t.same(await names('--filter', 'status=exited', '--filter', 'status=running'), [live.id, stopped.id].sort(), 'statuses are alternatives');
    t.same(await names('--filter', 'status=paused'), []);
    t.same(await names('--filter', 'label=dev.capybara.sandbox.egress=allowlist'), [live.id], 'a label with its value');
    t.same(await names('--filter', 'label=dev.capybara.sandbox.egress'), [live.id, stopped.id].sort(), 'a label that is there');
    t.same(await names('--filter', 'label=dev.capybara.sandbox.egress=none', '--filter', 'status=running'), [], 'different filters add up');
    t.same(await names('--filter', 'label=dev.capybara.sandbox.egress=none', '--filter', 'status=exited'), [stopped.id]);
    t.same(await names('--filter', `label=${TEST_LABEL}=someone-else`), [], 'labels add up with --label');
    const json = await op([...engine, 'ls', '--format', 'json', '--filter', 'status=running']);
    t.equal(json.code, 0, json.stderr);
    t.same((JSON.parse(json.stdout) as Array<{ name: string; state: string }>).map((r) => [r.name, r.state]), [[live.id, 'running']], '--format json: one array of the rows');
    // The two calls run a moment apart, so the age may have moved on by a second between them.
    const withoutAge = (stdout: string): { rows: unknown[]; ages: number[] } => {
      const rows = JSON.parse(stdout) as Array<{ ageSeconds: number }>;
      return { rows: rows.map(({ ageSeconds: _, ...rest }) => rest), ages: rows.map((r) => r.ageSeconds) };
    };
    const formatJson = withoutAge(json.stdout);
    const globalJson = withoutAge((await op([...engine, '--json', 'ls', '--filter', 'status=running'])).stdout);
    t.same(globalJson.rows, formatJson.rows, 'as --json prints them');
    t.ok(globalJson.ages.every((age, i) => age - formatJson.ages[i]! >= 0 && age - formatJson.ages[i]! <= 2), `the same ages, a moment later: ${JSON.stringify([formatJson.ages, globalJson.ages])}`);
    const tableOut = await op([...engine, 'ls', '--format', 'table', '--filter', 'status=exited']);
    t.match(tableOut.stdout, new RegExp(`^NAME\\s+STATE\\s+TIER\\s+AGE\\s+IMAGE\\s+EGRESS\\n${stopped.id}\\s+exited\\s+none\\s+\\d+s\\s+\\S+\\s+none\\n$`));
    t.match(await op([...engine, 'ls', '--filter', 'state=running']), { code: 2, stderr: /--filter "state=running": unknown filter "state"; the keys are label= and status=/ });
  });

  await t.test('inspect and exec through the socket proxy', async (t) => {
    const inspected = await op([...viaProxy, '--json', 'inspect', live.id]);
    t.equal(inspected.code, 0, inspected.stderr);
    const d = JSON.parse(inspected.stdout) as Record<string, unknown>;
    t.same([d.state, d.tier, d.egress, d.network, d.allowHosts], ['running', 'allowlist', 'running', `${live.id}-net`, [UPSTREAM_HOST]]);
    t.same(d.volumes, [`${live.id}-workspace`, `${live.id}-skills`], 'each volume once (the skills volume is mounted twice)');
    t.match(await op([...viaProxy, 'inspect', live.id]), { code: 0, stdout: /tier\s+allowlist/ });
    // One word after --: a shell command line. Several: a program and its arguments.
    const ran = await op([...viaProxy, 'exec', live.id, '--', 'echo out; echo err >&2; exit 7']);
    t.same([ran.code, ran.stdout, ran.stderr], [7, 'out\n', 'err\n']);
    const argv = await op([...viaProxy, 'exec', live.id, '--', 'sh', '-c', 'echo out; echo err >&2; exit 7']);
    t.same([argv.code, argv.stdout, argv.stderr], [7, 'out\n', 'err\n'], 'sh -c gets its script as one argument');
    const python = await op([...viaProxy, 'exec', live.id, '--', 'python3', '-c', 'print(1)']);
    t.same([python.code, python.stdout], [0, '1\n']);
    const missing = await op([...viaProxy, 'inspect', `cap-${env.runId}-nope`]);
    t.equal(missing.code, 1);
    t.match(missing.stderr, /not_found/);
  });

  await t.test('gc removes planted orphans only', async (t) => {
    const orphan = env.name('orph');
    const labels = { ...env.labels, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.name': orphan };
    await env.docker.createNetwork({ Name: `${orphan}-net`, Driver: 'bridge', Internal: true, Labels: labels, CheckDuplicate: true });
    await env.docker.createVolume({ Name: `${orphan}-workspace`, Labels: labels });
    await env.docker.createContainer({ name: `${orphan}-egress`, Image: SANDBOX_IMAGE, Cmd: ['sleep', 'infinity'], Labels: labels, HostConfig: { NetworkMode: `${orphan}-net` } });
    const keepVolume = `cap-ws.${env.runId}-keep`;
    await env.docker.createVolume({ Name: keepVolume, Labels: { ...env.labels, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.workspace': `${env.runId}-keep` } });
    const liveBefore = (await s.labelled(live.id)).sort();

    const young = await op([...engine, '--json', 'gc', '--dry-run']);
    t.same(JSON.parse(young.stdout), [], 'nothing is old enough with the default --min-age 10m');

    const dry = await op([...engine, '--json', 'gc', '--dry-run', '--min-age', '0']);
    t.equal(dry.code, 0, dry.stderr);
    const planned = (JSON.parse(dry.stdout) as Array<{ action: string; kind: string; name: string }>).map((r) => [r.action, r.kind, r.name]);
    t.same(planned, [
      ['would_remove', 'container', `${orphan}-egress`],
      ['would_remove', 'network', `${orphan}-net`],
      ['would_remove', 'volume', `${orphan}-workspace`],
    ]);
    t.ok(await env.docker.getNetwork(`${orphan}-net`).inspect().then(() => true, () => false), 'dry run removed nothing');
    t.match((await op([...engine, 'gc', '--dry-run', '--min-age', '0'])).stdout, /would_remove\s+network\s+\S+-orph-net\s+\S+-orph/);

    const real = await op([...engine, '--json', 'gc', '--min-age', '0']);
    t.equal(real.code, 0, real.stderr);
    t.same((JSON.parse(real.stdout) as Array<{ action: string }>).map((r) => r.action), ['removed', 'removed', 'removed']);
    t.same(await s.labelled(orphan), [], 'orphans gone');
    t.same((await s.labelled(live.id)).sort(), liveBefore, 'the live sandbox keeps every resource');
    t.ok(await env.docker.getVolume(keepVolume).inspect().then(() => true, () => false), 'persistent workspace kept');
    t.equal((await provider.exec(live, 'echo alive')).stdout, 'alive\n');
    const again = await op([...engine, 'gc', '--min-age', '0']);
    t.equal(again.stdout, 'no orphans\n');
  });

  await t.test('gc collects a sandbox whose controller was killed in the middle of its create', async (t) => {
    t.same((await s.labelled(live.id)).filter((n) => n.endsWith('-building')), [], 'a finished create leaves no marker');
    const id = `${env.runId}-half`;
    const name = `cap-${id}`;
    // A controller process whose create waits (an egress image that never answers its health
    // check: up to 15 s), killed once every step but that wait has finished: the sandbox container
    // runs, its workspace was handed over (that container gone), and the egress proxy has its leg
    // on the sandbox's network (its policy volume made before). Steps run side by side, so the
    // sandbox can run before the proxy's volume exists: a kill then leaves a request in flight
    // that dockerd finishes after the listing below. What SIGKILL mid-create leaves.
    const script = `import { createDockerSandbox } from './controller/index.ts';
const provider = createDockerSandbox({ endpoint: ${JSON.stringify(s.proxy.endpoint)}, network: ${JSON.stringify(s.sharedNetwork)}, egressIsolation: 'sandbox', egressProxyImage: ${JSON.stringify(SANDBOX_IMAGE)} }, { labels: ${JSON.stringify(env.labels)} });
await provider.create({ id: ${JSON.stringify(id)}, image: ${JSON.stringify(SANDBOX_IMAGE)}, limits: { egress: 'allowlist', allowHosts: ['half.capybara.test'] } });`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: root, stdio: 'ignore' });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const deadline = Date.now() + 30_000;
    const waiting = async (): Promise<boolean> => {
      const [running, handingOver, legged] = await Promise.all([
        env.docker.getContainer(name).inspect().then((i) => i.State.Running, () => false),
        env.docker.getContainer(`${name}.handover`).inspect().then(() => true, () => false),
        env.docker.getContainer(`${name}-egress`).inspect().then((i) => `${name}-net` in (i.NetworkSettings.Networks ?? {}), () => false),
      ]);
      return running && !handingOver && legged;
    };
    while (!(await waiting())) {
      if (Date.now() > deadline) throw new Error(`${name} did not reach its egress proxy's health check within 30 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
    child.kill('SIGKILL');
    await exited;
    // A request the killed process had sent is still finished by dockerd: listed once two
    // listings half a second apart agree.
    const listing = async (): Promise<string[]> => (await s.labelled(name)).map((n) => n.replace(/^\//, '')).sort();
    let left = await listing();
    for (;;) {
      await new Promise((r) => setTimeout(r, 500));
      const again = await listing();
      if (JSON.stringify(again) === JSON.stringify(left)) break;
      left = again;
    }
    t.ok(left.includes(name) && left.includes(`${name}-building`), `left half-built: ${left.join(' ')}`);
    const dry = await op([...engine, '--json', 'gc', '--dry-run', '--min-age', '0']);
    const planned = (JSON.parse(dry.stdout) as Array<{ action: string; name: string; halfBuilt?: boolean }>);
    t.same(planned.map((r) => r.name).sort(), left, 'every piece of it, its running container included');
    t.ok(planned.every((r) => r.halfBuilt === true));
    t.equal(planned.at(-1)?.name, `${name}-building`, 'its marker last');
    const real = await op([...engine, '--json', 'gc', '--min-age', '0']);
    t.equal(real.code, 0, real.stderr);
    t.same(await s.labelled(name), [], `all of it gone: ${real.stdout}`);
    t.equal((await provider.exec(live, 'echo alive')).stdout, 'alive\n', 'a sandbox whose create finished is kept');
  });

  await t.test('doctor through the socket proxy: every check passes', async (t) => {
    const started = Date.now();
    const r = await op([...viaProxy, '--json', 'doctor']);
    t.comment(`doctor took ${Date.now() - started} ms`);
    const checks = JSON.parse(r.stdout) as Array<{ check: string; status: string; detail: string }>;
    t.same(checks.map((c) => [c.check, c.status]), [
      ['engine_reachable', 'pass'], ['socket_proxy_refuses', 'pass'], ['images_present', 'pass'],
      ['shared_network_icc_off', 'pass'], ['runtime_usable', 'pass'], ['isolation', 'pass'],
      ['transparent_egress', 'pass'], ['sandboxes_egress', 'pass'],
    ], JSON.stringify(checks, null, 1));
    t.equal(r.code, 0);
    const leftovers = await env.docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${env.runId}`], name: ['cap-doctor-'] } });
    t.same(leftovers.map((c) => c.Names), [], 'the throwaway sandbox is gone');
    const human = await op([...viaProxy, 'doctor']);
    // Each check is printed as it finishes: one write each, in order, the first long before the last.
    t.same(human.writes.map((w) => /^\[\w+\] (\w+):/.exec(w.text)?.[1]), checks.map((c) => c.check), 'one write per check, in order');
    const first = human.writes[0]?.at ?? 0;
    const last = human.writes.at(-1)?.at ?? 0;
    t.ok(last - first > 1_000, `engine_reachable was printed ${last - first} ms before the last check, not at the end`);
    t.match(human.stdout, /^\[PASS\] engine_reachable: /m);
    t.match(human.stdout, /^\[PASS\] isolation: Unreachable from cap-doctor-\w+: 169\.254\.169\.254:80, 192\.0\.2\.1:443/m);
    t.match(human.stdout, /^\[PASS\] transparent_egress: Name server 10\.\d+\.\d+\.\d+: doctor\.capybara\.invalid resolves to it, an unlisted name failed in \d+ ms, HTTP by Host answered dns_failed\.$/m);
  });

  await t.test('doctor with the shared egress (egressIsolation shared): every check passes, on a shard', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cap-opcfg-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'shared.json');
    writeFileSync(file, JSON.stringify({ endpoint: s.proxy.endpoint, network: s.sharedNetwork, egressIsolation: 'shared' }));
    const r = await op(['--config', file, '--label', `${TEST_LABEL}=${env.runId}`, '--json', 'doctor']);
    const checks = JSON.parse(r.stdout) as Array<{ check: string; status: string; detail: string }>;
    t.same(checks.filter((c) => c.status !== 'pass' && c.check !== 'sandboxes_egress').map((c) => c.check), [], JSON.stringify(checks, null, 1));
    t.match(checks.find((c) => c.check === 'transparent_egress')?.detail, /resolves to it/);
    t.ok((await env.docker.listContainers({ all: true, filters: { name: [`cap-egress.0.${s.sharedNetwork}`] } })).length === 1, 'a shard served the throwaway sandbox');
  });

  await t.test('doctor through the socket proxy with a shared network the socket proxy does not know names the setting', async (t) => {
    const other = env.name('docnet');
    const r = await op([...viaProxy, '--network', other, '--json', 'doctor']);
    t.equal(r.code, 1);
    const checks = JSON.parse(r.stdout) as Array<{ check: string; status: string; detail: string; fix?: string }>;
    t.match(checks.find((c) => c.check === 'shared_network_icc_off'), { status: 'pass', detail: /does not exist yet/ });
    t.match(checks.find((c) => c.check === 'runtime_usable'), {
      status: 'fail',
      detail: /network_option_required:Internal/,
      fix: new RegExp(`SOCKET_PROXY_SHARED_NETWORK=${other}`),
    });
    t.notOk(await env.docker.getNetwork(other).inspect().then(() => true, () => false), 'no network was made');
  });

  await t.test('doctor through the socket proxy with an image it does not admit: a failed check naming the reason, not a crash', async (t) => {
    const r = await op([...viaProxy, '--image', 'capybara-unlisted:1', '--json', 'doctor']);
    t.equal(r.code, 1, r.stderr);
    const checks = JSON.parse(r.stdout) as Array<{ check: string; status: string; detail: string }>;
    t.match(checks.find((c) => c.check === 'images_present'), { status: 'fail', detail: 'Missing: capybara-unlisted:1 (refused by the socket proxy: image_not_allowed).' });
  });

  await t.test('doctor against the engine itself fails the proxy check and names the ICC problem', async (t) => {
    // A shared network as docker network create makes it: inter-container traffic on.
    const open = env.name('iccnet');
    await env.docker.createNetwork({ Name: open, Driver: 'bridge', Labels: env.labels, CheckDuplicate: true });
    t.teardown(() => env.docker.getNetwork(open).remove().catch(() => undefined));
    const r = await op([...engine, '--network', open, 'doctor']);
    t.equal(r.code, 1);
    t.match(r.stdout, /^\[FAIL\] socket_proxy_refuses: The endpoint accepted a privileged container create .*\n\s+fix: Point endpoint at the socket proxy/m);
    t.match(r.stdout, /^\[FAIL\] shared_network_icc_off: .*allows inter-container traffic/m);
    t.match(r.stdout, /^\[FAIL\] runtime_usable: .*cannot be used: its option com\.docker\.network\.bridge\.enable_icc .*\n\s+fix: See shared_network_icc_off above/m);
    t.match(r.stdout, /^\[SKIP\] isolation: No throwaway sandbox could be started/m);
  });

  await t.test('an egress proxy taken off the sandbox network: ls, inspect and doctor say so; the next command puts it back', async (t) => {
    await env.docker.getNetwork(`${live.id}-net`).disconnect({ Container: `${live.id}-egress` });
    const listed = JSON.parse((await op([...engine, '--json', 'ls'])).stdout) as Array<Record<string, unknown>>;
    t.same(listed.map((r) => [r.name, r.state, r.egress]), [[live.id, 'running', 'detached']], 'ls: running, but detached');
    const inspected = JSON.parse((await op([...viaProxy, '--json', 'inspect', live.id])).stdout) as Record<string, unknown>;
    t.equal(inspected.egress, 'detached', 'inspect, through the socket proxy');
    t.match(inspected.subnet, /^10\.213\.\d+\.\d+\/28$/, 'inspect shows the subnet of the pool');
    const doctor = await op([...viaProxy, '--json', 'doctor']);
    const checks = JSON.parse(doctor.stdout) as Array<{ check: string; status: string; detail: string }>;
    t.match(checks.find((c) => c.check === 'sandboxes_egress'), { status: 'fail', detail: `${live.id} (egress proxy detached)` });
    t.equal(doctor.code, 1, 'doctor fails');
    const r = await provider.exec(live, `curl -sS -m 10 http://${UPSTREAM_HOST}/`);
    t.equal(r.stdout, UPSTREAM_BODY, `the pre-exec check put the proxy back: ${r.stderr}`);
    const after = JSON.parse((await op([...engine, '--json', 'ls'])).stdout) as Array<Record<string, unknown>>;
    t.same(after.map((row) => row.egress), ['running']);
  });

  await t.test('an egress proxy whose process dies is restarted by the engine', async (t) => {
    const proxy = () => env.docker.getContainer(`${live.id}-egress`).inspect();
    const before = await proxy();
    // A crash, not a docker stop or kill (the engine restarts neither by design).
    execFileSync('kill', ['-9', String(before.State.Pid)]);
    const deadline = Date.now() + 30_000;
    let now = await proxy();
    while (!(now.RestartCount > before.RestartCount && now.State.Status === 'running') && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      now = await proxy();
    }
    t.ok(now.RestartCount > before.RestartCount && now.State.Status === 'running', `restarted: ${now.RestartCount} restarts, ${now.State.Status}`);
    t.same(Object.keys(now.NetworkSettings.Networks).sort(), Object.keys(before.NetworkSettings.Networks).sort(), 'on the same networks');
    const r = await provider.exec(live, `for i in $(seq 50); do curl -sS -m 5 http://${UPSTREAM_HOST}/ && exit 0; sleep 0.2; done; exit 1`);
    t.equal(r.stdout.endsWith(UPSTREAM_BODY), true, `the sandbox's way out works again: ${r.stderr}`);
  });

  await t.test('destroy', async (t) => {
    const r = await op([...viaProxy, 'destroy', live.id]);
    t.equal(r.code, 0, r.stderr);
    t.same(await s.labelled(live.id), []);
    t.match(await op([...viaProxy, 'inspect', live.id]), { code: 1, stderr: /not_found/ });
    t.match(await op([...viaProxy, 'destroy', live.id]), { code: 1, stderr: new RegExp(`not_found: no such sandbox ${live.id}: nothing to destroy \\(--force`) }, 'again: no such sandbox');
    t.match(await op([...viaProxy, 'destroy', '--force', live.id]), { code: 0, stdout: `no sandbox ${live.id}: nothing to destroy\n` }, '--force: as docker rm -f, and says nothing was there');
    t.match(await op([...viaProxy, 'ls', live.id]), { code: 2 }, 'a usage error exits 2');
  });
});
