import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { modemOptions, parseEndpoint } from '../../../controller/docker/endpoint.js';
import { isSandboxError } from '../../../controller/spec/errors.js';

t.test('endpoints', async (t) => {
  const rows: { name: string; endpoint: string; want: unknown }[] = [
    { name: 'tcp host', endpoint: 'tcp://sandbox-proxy:2375', want: { kind: 'tcp', host: 'sandbox-proxy', port: 2375 } },
    { name: 'tcp trailing slash', endpoint: 'tcp://10.0.0.2:2375/', want: { kind: 'tcp', host: '10.0.0.2', port: 2375 } },
    { name: 'tcp IPv6', endpoint: 'tcp://[fd00::2]:2376', want: { kind: 'tcp', host: 'fd00::2', port: 2376 } },
    { name: 'unix', endpoint: 'unix:///run/proxy/docker.sock', want: { kind: 'unix', socketPath: '/run/proxy/docker.sock' } },
  ];
  for (const row of rows) t.same(parseEndpoint(row.endpoint), row.want, row.name);
  for (const bad of ['tcp://h:0', 'tcp://h:70000', 'http://h:1', 'tcp://h', 'unix://relative']) {
    try {
      parseEndpoint(bad);
      t.fail(bad);
    } catch (err) {
      t.ok(isSandboxError(err, 'invalid_config'), bad);
    }
  }
});

t.test('mTLS material comes from the certificate directory only', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capybara-certs-'));
  for (const file of ['ca.pem', 'cert.pem', 'key.pem']) writeFileSync(join(dir, file), file);
  const options = modemOptions('tcp://engine:2376', dir);
  t.equal(options.protocol, 'https');
  t.equal(options.ca?.toString(), 'ca.pem');
  t.equal(options.key?.toString(), 'key.pem');
  t.same(modemOptions('tcp://engine:2375', undefined), { host: 'engine', port: 2375, protocol: 'http' });
  try {
    modemOptions('tcp://engine:2376', join(dir, 'missing'));
    t.fail('missing directory accepted');
  } catch (err) {
    t.ok(isSandboxError(err, 'invalid_config'));
    t.match((err as Error).message, 'tlsCertDir');
  }
  try {
    modemOptions('unix:///x.sock', dir);
    t.fail('tls on a unix socket accepted');
  } catch (err) {
    t.ok(isSandboxError(err, 'invalid_config'));
  }
});
