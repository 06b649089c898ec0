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

t.test('a variable that is a slip of one the proxy reads stops it, naming the one meant', async (t) => {
  const rows: { name: string; env: Record<string, string>; message: RegExp }[] = [
    { name: 'a letter wrong', env: { EGRESS_REQUIRE_SNl: 'true' }, message: /^EGRESS_REQUIRE_SNl is set, and capybara-egress reads no such variable: did you mean EGRESS_REQUIRE_SNI\? Rename it, or unset it$/ },
    { name: 'the flag\'s singular', env: { EGRESS_DNS_SERVER: '10.0.0.53' }, message: /^EGRESS_DNS_SERVER .* did you mean EGRESS_DNS_SERVERS\?/ },
    { name: 'lower case', env: { egress_upstream_ca: '/etc/ca.pem' }, message: /did you mean EGRESS_UPSTREAM_CA\?/ },
    { name: 'an underscore missing', env: { EGRESS_MAXCONNECTIONS_PER_CLIENT: '8' }, message: /did you mean EGRESS_MAX_CONNECTIONS_PER_CLIENT\?/ },
    { name: 'the port list twin', env: { ALLOW_CONNECT_PORT: '443' }, message: /did you mean ALLOW_CONNECT_PORTS\?/ },
    { name: 'the inline CA', env: { EGRESS_CA_INLNE: 'x' }, message: /did you mean EGRESS_CA_INLINE\?/ },
  ];
  for (const row of rows) t.throws(() => parseConfig(['--allow-hosts', 'a.test'], row.env), { code: 'invalid_config', message: row.message }, row.name);
  // Names that are no slip: what the proxy reads, a secret's placeholder, a Kubernetes service
  // link of a Service named egress, the image's own variables.
  const fine = {
    EGRESS_REQUIRE_SNI: 'true', EGRESS_DNS_SERVERS: '10.0.0.53', EGRESS_PLACEHOLDER_GITHUB_TOKEN: 'p'.repeat(20), GITHUB_TOKEN: 'v',
    EGRESS_SERVICE_HOST: '10.96.0.53', EGRESS_SERVICE_PORT: '3128', EGRESS_PORT: 'tcp://10.96.0.53:3128', EGRESS_PORT_3128_TCP_ADDR: '10.96.0.53',
    NODE_ENV: 'production', PATH: '/usr/bin', HOME: '/nonexistent',
  };
  t.equal(parseConfig([], { ...fine, EGRESS_ALLOW_HOSTS: 'a.test' })?.requireTls, true, 'none of them is refused');
});
