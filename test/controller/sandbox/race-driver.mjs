// One controller process for docker-scale.test.ts: the built plugin entry (dist/index.mjs, as the
// host loads it) does one call on one sandbox id at a given moment, so that several such
// processes race as several controller replicas would, and prints what the call said as one JSON
// line: {"ok":true} or {"ok":false,"code":...,"message":...}.
//
// Usage: node race-driver.mjs <endpoint> <shared network> <test label value> <create|destroy|exec> <id> <start at, ms since epoch>
import { createDockerSandbox } from '../../../dist/index.mjs';

const [endpoint, network, runLabel, op, id, startAt] = process.argv.slice(2);
const provider = createDockerSandbox({ endpoint, network }, { labels: { 'dev.capybara.test': runLabel } });
await new Promise((resolve) => setTimeout(resolve, Math.max(0, Number(startAt) - Date.now())));
try {
  if (op === 'create') {
    await provider.create({ id, image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', allowHosts: ['race.capybara.invalid'], memoryMb: 64 } });
  } else if (op === 'destroy') {
    await provider.destroyByName(`cap-${id}`);
  } else if (op === 'exec') {
    const r = await provider.exec({ id: `cap-${id}` }, 'true', { timeoutMs: 60_000 });
    if (r.exitCode !== 0) throw Object.assign(new Error(`exit ${r.exitCode}: ${r.stderr}`), { code: 'exit' });
  } else {
    throw Object.assign(new Error(`unknown operation ${op}`), { code: 'usage' });
  }
  process.stdout.write(`${JSON.stringify({ ok: true })}\n`);
} catch (err) {
  process.stdout.write(`${JSON.stringify({ ok: false, code: err?.code ?? 'raw', message: String(err?.message ?? err) })}\n`);
}
