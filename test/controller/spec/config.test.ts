import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseDeploymentConfig } from '../../../controller/spec/config.js';
import { PLUGIN_JSON_PATH, packageVersion, renderPluginManifest } from '../../../controller/plugin-manifest.js';
import { isSandboxError, sandboxErrorCodes } from '../../../controller/spec/errors.js';

const root = join(import.meta.dirname, '..', '..', '..');

t.test('defaults are applied and the result is frozen', async (t) => {
  const config = parseDeploymentConfig({ endpoint: 'tcp://sandbox-proxy:2375' });
  t.same(config, {
    endpoint: 'tcp://sandbox-proxy:2375',
    runtime: 'runc',
    network: 'capybara-sandbox',
    egressProxyImage: 'capybara-sandbox-egress:latest',
    maxLimits: { cpu: 4, memoryMb: 16_384, diskMb: 102_400, execTimeoutMs: 4 * 3_600_000, outputBytes: 16 * 1024 * 1024, readBytes: 256 * 1024 * 1024 },
    persistentHome: false,
    sharedWorkspaces: false,
    commandIsolation: 'landlock',
    allowOpenEgress: false,
    egressIsolation: 'shared',
    egressShardSize: 250,
    warmSlots: 0,
    logMaxSizeMb: 10,
    logMaxFiles: 3,
    addressPool: '10.213.0.0/16',
    subnetPrefix: 28,
  });
  t.ok(Object.isFrozen(config));
});

t.test('volumeDriver: a plugin name, and empty is the local driver', async (t) => {
  t.equal(parseDeploymentConfig({ endpoint: 'tcp://a:1', volumeDriver: 'quota-1.x' }).volumeDriver, 'quota-1.x');
  const empty = parseDeploymentConfig({ endpoint: 'tcp://a:1', volumeDriver: '' });
  t.notOk('volumeDriver' in empty, 'an empty name is no driver (one compose variable for the controller and the socket proxy)');
  t.ok(Object.isFrozen(empty));
});

const invalid: { name: string; input: unknown; mentions: string }[] = [
  { name: 'unknown key is named', input: { endpoint: 'unix:///run/p.sock', allowOpenEgres: true }, mentions: '"allowOpenEgres"' },
  { name: 'endpoint is required', input: {}, mentions: 'endpoint' },
  { name: 'egressIsolation is shared or sandbox', input: { endpoint: 'unix:///run/p.sock', egressIsolation: 'process' }, mentions: 'egressIsolation' },
  { name: 'a shard holds at most 1,000 sandboxes', input: { endpoint: 'unix:///run/p.sock', egressShardSize: 1001 }, mentions: 'egressShardSize' },
  { name: 'http scheme refused', input: { endpoint: 'http://x:1' }, mentions: 'endpoint' },
  { name: 'relative unix path refused', input: { endpoint: 'unix://run/x' }, mentions: 'endpoint' },
  { name: 'network must start with cap', input: { endpoint: 'tcp://a:1', network: 'sandbox' }, mentions: 'network' },
  { name: 'runtime enum', input: { endpoint: 'tcp://a:1', runtime: 'kata' }, mentions: 'runtime' },
  { name: 'an endpoint port above 65535', input: { endpoint: 'tcp://a:99999' }, mentions: 'endpoint' },
  { name: 'an endpoint port 0', input: { endpoint: 'tcp://a:0' }, mentions: 'endpoint' },
  { name: 'an endpoint port with a leading zero', input: { endpoint: 'tcp://a:02375' }, mentions: 'endpoint' },
  { name: 'non-ASCII image refused', input: { endpoint: 'tcp://a:1', egressProxyImage: 'égress' }, mentions: 'egressProxyImage' },
  { name: 'allowOpenEgress must be boolean', input: { endpoint: 'tcp://a:1', allowOpenEgress: 'yes' }, mentions: 'allowOpenEgress' },
  // To dockerd a volume driver name is the path of its plugin socket under /run/docker/plugins.
  { name: 'volumeDriver as a path refused', input: { endpoint: 'tcp://a:1', volumeDriver: '../../var/lib/docker/volumes/cap-x/_data/evil' }, mentions: 'volumeDriver' },
  { name: 'volumeDriver with a slash refused', input: { endpoint: 'tcp://a:1', volumeDriver: 'vendor/plugin' }, mentions: 'volumeDriver' },
  { name: 'volumeDriver with .. refused', input: { endpoint: 'tcp://a:1', volumeDriver: 'a..b' }, mentions: 'volumeDriver' },
  { name: 'logMaxSizeMb over the socket proxy cap refused', input: { endpoint: 'tcp://a:1', logMaxSizeMb: 101 }, mentions: 'logMaxSizeMb' },
  { name: 'logMaxSizeMb must be whole', input: { endpoint: 'tcp://a:1', logMaxSizeMb: 1.5 }, mentions: 'logMaxSizeMb' },
  { name: 'logMaxSizeMb of 0 refused', input: { endpoint: 'tcp://a:1', logMaxSizeMb: 0 }, mentions: 'logMaxSizeMb' },
  { name: 'logMaxFiles over the socket proxy cap refused', input: { endpoint: 'tcp://a:1', logMaxFiles: 6 }, mentions: 'logMaxFiles' },
  // The socket proxy admits only private subnets of /24 to /29 for sandbox networks.
  { name: 'a public address pool refused', input: { endpoint: 'tcp://a:1', addressPool: '8.8.0.0/16' }, mentions: 'addressPool: must lie inside a private range' },
  { name: 'an address pool with host bits refused', input: { endpoint: 'tcp://a:1', addressPool: '10.213.1.0/16' }, mentions: 'addressPool: has host bits set (the block starts at 10.213.0.0/16)' },
  { name: 'an address pool that is not a CIDR refused', input: { endpoint: 'tcp://a:1', addressPool: '10.213.0.0' }, mentions: 'addressPool' },
  { name: 'an IPv6 address pool refused', input: { endpoint: 'tcp://a:1', addressPool: 'fd00::/48' }, mentions: 'addressPool' },
  { name: 'a pool smaller than one subnet refused', input: { endpoint: 'tcp://a:1', addressPool: '10.213.0.0/29', subnetPrefix: 28 }, mentions: 'addressPool: is smaller than one sandbox subnet (/28)' },
  { name: 'subnetPrefix /30 refused', input: { endpoint: 'tcp://a:1', subnetPrefix: 30 }, mentions: 'subnetPrefix' },
  { name: 'subnetPrefix /23 refused', input: { endpoint: 'tcp://a:1', subnetPrefix: 23 }, mentions: 'subnetPrefix' },
];
for (const row of invalid) {
  t.test(row.name, async (t) => {
    try {
      parseDeploymentConfig(row.input);
      t.fail('should throw');
    } catch (err) {
      t.ok(isSandboxError(err, 'invalid_config'));
      t.match((err as Error).message, row.mentions);
      t.match((err as Error).message, 'extensionConfig."sandbox-docker"');
    }
  });
}

t.test('committed plugin.json equals the one generated from the zod schema', async (t) => {
  const committed = readFileSync(join(root, PLUGIN_JSON_PATH), 'utf8');
  t.equal(committed, renderPluginManifest(packageVersion(root)), 'run: npm run build && node dist/controller/plugin-manifest.js --write');
  const manifest = JSON.parse(committed);
  t.equal(manifest.schemaVersion, 1);
  t.equal(manifest.name, 'sandbox-docker');
  t.equal(manifest.extension.entry, './dist/index.mjs');
  t.same(manifest.extension.manifest.provides, ['sandbox@1']);
  const schema = manifest.extension.configSchemas.deployment;
  t.equal(schema.additionalProperties, false);
  t.same(schema.required, ['endpoint']);
  t.same(manifest.extension.manifest.config.deployment.map((d: { path: string }) => d.path).sort(), Object.keys(schema.properties).sort());
  for (const [key, prop] of Object.entries(schema.properties as Record<string, { description?: string }>)) {
    t.ok(prop.description, `${key} is described`);
  }
});

t.test('every error code is documented in docs/controller.md', async (t) => {
  const docs = readFileSync(join(root, 'docs', 'controller.md'), 'utf8');
  for (const code of Object.keys(sandboxErrorCodes)) t.ok(docs.includes(`\`${code}\``), code);
});
