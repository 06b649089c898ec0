/**
 * Scale and races on the real engine, through the real socket proxy (issue 18):
 *  - 60 internal-tier sandboxes, created six at a time, each running a command, all destroyed,
 *    nothing left. Docker's default address pools hold about 30 networks per engine; each
 *    sandbox network takes a /28 of the controller's own pool instead, so number 31 is no wall.
 *  - Several controller processes (child processes running the built plugin entry) creating,
 *    destroying and running commands in one sandbox id at the same moment, round after round:
 *    every call succeeds or says `conflict` (an exec of a missing sandbox: `not_found`), never a
 *    raw engine error, and the id is never wedged (Docker 20.10's CheckDuplicate race used to
 *    leave several networks of one name, after which every call on the id failed as ambiguous).
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sandboxTestEnv, SANDBOX_IMAGE } from '../../support/sandbox-env.js';
import { TEST_LABEL } from '../../support/docker.js';
import { isSandboxError } from '../../../controller/index.js';

const DRIVER = fileURLToPath(new URL('./race-driver.mjs', import.meta.url));

t.test('60 internal sandboxes, six at a time: each runs a command, all are destroyed, nothing is left', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env, provider } = s;
  const ids = Array.from({ length: 60 }, (_, i) => `${env.runId}-i${i}`);
  const failures: string[] = [];
  const started = Date.now();
  for (let at = 0; at < ids.length; at += 6) {
    await Promise.all(ids.slice(at, at + 6).map(async (id) => {
      try {
        const h = await provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'internal', memoryMb: 64 } });
        const r = await provider.exec(h, 'echo "$(hostname) up"');
        if (r.exitCode !== 0 || !r.stdout.endsWith(' up\n')) failures.push(`${id}: exit ${r.exitCode} ${r.stderr}`);
      } catch (err) {
        failures.push(`${id}: ${isSandboxError(err) ? err.code : 'raw'} ${(err as Error).message}`);
      }
    }));
  }
  t.comment(`60 created and ran a command in ${Date.now() - started} ms`);
  t.same(failures, [], 'every one of the 60 was created and ran its command');
  const subnets = new Set<string>();
  for (const n of await env.docker.listNetworks({ filters: { label: [`${TEST_LABEL}=${env.runId}`, 'dev.capybara.sandbox.subnet'] } })) {
    subnets.add(n.IPAM?.Config?.[0]?.Subnet ?? '');
  }
  t.equal(subnets.size, 60, 'sixty networks, sixty distinct subnets');
  t.ok([...subnets].every((n) => /^10\.213\.\d+\.\d+\/28$/.test(n)), 'each a /28 of the controller\'s pool');
  const destroyStarted = Date.now();
  for (let at = 0; at < ids.length; at += 6) await Promise.all(ids.slice(at, at + 6).map((id) => provider.destroyByName(`cap-${id}`)));
  t.comment(`60 destroyed in ${Date.now() - destroyStarted} ms`);
  const left = await Promise.all(ids.map((id) => s.labelled(`cap-${id}`)));
  t.same(left.flat(), [], 'nothing of any of them is left');
});

interface DriverResult {
  readonly ok: boolean;
  readonly code?: string;
  readonly message?: string;
}

function drive(endpoint: string, network: string, runLabel: string, op: string, id: string, startAt: number): Promise<DriverResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, [DRIVER, endpoint, network, runLabel, op, id, String(startAt)], { timeout: 180_000 }, (err, stdout, stderr) => {
      const line = stdout.trim().split('\n').pop() ?? '';
      try {
        resolve(JSON.parse(line) as DriverResult);
      } catch {
        resolve({ ok: false, code: 'driver_failed', message: `${String(err)} ${stderr.slice(0, 500)}` });
      }
    });
  });
}

t.test('controller processes racing on one id: success or conflict, never a wedged id', async (t) => {
  const s = await sandboxTestEnv(t);
  if (!s) return;
  const { env, provider } = s;
  const id = `${env.runId}-race`;
  const name = `cap-${id}`;
  // Four processes per round, all told to start at the same moment.
  const rounds: string[][] = [
    ['create', 'create', 'create', 'create'],
    ['create', 'create', 'create', 'create'],
    ['create', 'create', 'create', 'create'],
    ['create', 'create', 'destroy', 'exec'],
    ['destroy', 'create', 'exec', 'create'],
    ['create', 'destroy', 'destroy', 'exec'],
  ];
  const said: string[] = [];
  const unclear: string[] = [];
  for (const [r, ops] of rounds.entries()) {
    const startAt = Date.now() + 2500;
    const results = await Promise.all(ops.map((op) => drive(s.proxy.endpoint, s.sharedNetwork, env.runId, op, id, startAt)));
    for (const [k, res] of results.entries()) {
      const op = ops[k] ?? '';
      const outcome = res.ok ? 'ok' : res.code ?? 'raw';
      said.push(`round ${r + 1} ${op}: ${outcome}`);
      const clear = res.ok || res.code === 'conflict' || (op === 'exec' && res.code === 'not_found');
      if (!clear) unclear.push(`round ${r + 1} ${op}: ${outcome}: ${res.message ?? ''}`);
    }
    // After every round: at most one network of the name, and a sandbox that is there works.
    const networks = await env.docker.listNetworks({ filters: { label: [`dev.capybara.sandbox.name=${name}`] } });
    const container = await env.docker.getContainer(name).inspect().catch(() => undefined);
    if (container !== undefined && networks.length > 1) unclear.push(`round ${r + 1}: ${networks.length} networks named ${name}-net under a sandbox`);
  }
  t.comment(said.join('; '));
  t.same(unclear, [], 'every call succeeded or said conflict; never two networks under a sandbox');
  // Never wedged: whatever is left, the next create, command and destroy work and leave nothing.
  const h = await provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: ['race.capybara.invalid'], memoryMb: 64 } });
  t.equal((await provider.exec(h, 'echo ok')).stdout, 'ok\n', 'a create and a command work afterwards');
  t.equal((await env.docker.listNetworks({ filters: { label: [`dev.capybara.sandbox.name=${name}`] } })).length, 1, 'one network of the name');
  await provider.destroy(h);
  t.same(await s.labelled(name), [], 'and a destroy leaves nothing');
});
