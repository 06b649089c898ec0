/**
 * The proxy's configuration fails closed (proxy/config.ts): a setting it would not apply is an
 * error naming it and what to do, never a start on the default the operator meant to change.
 */
import t from 'tap';
import { parseConfig } from '../../proxy/config.js';

t.test('a shared proxy refuses the settings each registration brings itself', async (t) => {
  const rows: { name: string; args: string[]; env: Record<string, string>; message: RegExp }[] = [
    { name: 'connect ports by variable', args: [], env: { EGRESS_TENANTS_DIR: '/run/t', ALLOW_CONNECT_PORTS: '443' }, message: /^both EGRESS_TENANTS_DIR and ALLOW_CONNECT_PORTS are set: .*connectPorts and mode from its registration's policy; drop ALLOW_CONNECT_PORTS/ },
    { name: 'connect ports by flag', args: ['--tenants-dir', '/run/t', '--connect-ports', '443'], env: {}, message: /^both --tenants-dir and --connect-ports are set/ },
    { name: 'report mode by variable', args: ['--tenants-dir', '/run/t'], env: { EGRESS_MODE: 'report' }, message: /^both --tenants-dir and EGRESS_MODE are set/ },
    { name: 'enforce mode by flag', args: ['--tenants-dir', '/run/t', '--mode', 'enforce'], env: {}, message: /^both --tenants-dir and --mode are set/ },
  ];
  for (const row of rows) t.throws(() => parseConfig(row.args, row.env), { code: 'invalid_config', message: row.message }, row.name);
  t.equal(parseConfig(['--tenants-dir', '/run/t'], { EGRESS_REQUIRE_SNI: 'true' })?.tenantsDir, '/run/t', 'the settings a shared proxy applies to every sandbox are taken');
  t.same(parseConfig(['--allow-hosts', 'a.test', '--connect-ports', '443'], {})?.connectPorts, [443], 'a proxy with its own policy takes the ports');
});
