// The stand-in for the Capybara host application in deploy/compose.yaml (docs/operator.md).
//
// It loads the plugin the way the host does: .capybara-plugin/plugin.json names the entry, the
// entry's default export is called with extensionConfig."sandbox-docker" (from
// CAPYBARA_EXTENSION_CONFIG), and the result holds the sandbox@1 provider. Then it proves the
// deployment once: a sandbox is created through the socket proxy, runs a command and is removed.
// It logs one JSON line per step, marks itself healthy (/tmp/ready) and waits for SIGTERM. Any
// failure is logged and ends the process with exit code 1, so `docker-compose ps` shows it.
// Replace this service with the real host; nothing else in the deployment changes.
import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';

const log = (fields) => process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), service: 'host-stub', ...fields })}\n`);
const root = new URL('..', import.meta.url);

try {
  const manifest = JSON.parse(readFileSync(new URL('.capybara-plugin/plugin.json', root), 'utf8'));
  const all = JSON.parse(process.env.CAPYBARA_EXTENSION_CONFIG ?? '{}');
  const { default: activate } = await import(new URL(manifest.extension.entry, root).href);
  const { 'sandbox@1': sandbox } = activate(all[manifest.name]);
  log({ event: 'activated', plugin: manifest.name, version: manifest.version, provides: manifest.extension.manifest.provides });

  const started = Date.now();
  const handle = await sandbox.create({ id: `host-stub-${hostname()}`, image: 'capybara-sandbox:latest', limits: { egress: 'allowlist', allowHosts: [] } });
  try {
    const r = await sandbox.exec(handle, 'id -un', { timeoutMs: 30_000 });
    if (r.exitCode !== 0 || r.stdout !== 'sandbox\n') throw new Error(`the check command gave exit ${r.exitCode}, output ${JSON.stringify(r.stdout + r.stderr)}`);
  } finally {
    await sandbox.destroy(handle);
  }
  log({ event: 'ready', sandbox: handle.id, checkMs: Date.now() - started });
  writeFileSync('/tmp/ready', `${handle.id}\n`);
} catch (err) {
  log({ event: 'failed', code: err?.code, error: err instanceof Error ? err.message : String(err) });
  process.exit(1);
}

// A signal listener alone does not keep Node running; the timer does, until SIGTERM.
const idle = setInterval(() => undefined, 1 << 30);
process.once('SIGTERM', () => {
  clearInterval(idle);
  log({ event: 'stopped' });
});
