/**
 * A refusal's detail can quote what a peer chose (Node's words on an upstream certificate list
 * every name in it): the body, the status line and the decision line each carry at most a bounded
 * part of it, so one refusal never costs a body or a log line of the peer's size.
 */
import t from 'tap';
import pino from 'pino';
import { DecisionRecorder, DETAIL_MAX, refusalBytes, type ProxyObserver, type Refusal } from '../../proxy/record/index.js';
import { captureLogs } from '../support/log-capture.js';

const names = Array.from({ length: 5_000 }, (_, i) => `DNS:name-${i}.example.test`).join(', ');
const refusal: Refusal = {
  reason: 'upstream_tls_invalid',
  detail: `the certificate of api.test is not valid for it under the proxy's trust store: Hostname/IP does not match certificate's altnames: Host: api.test. is not in the cert's altnames: ${names} (ERR_TLS_CERT_ALTNAME_INVALID)`,
  host: 'api.test',
  port: 443,
};

t.test('the response carries a bounded detail', async (t) => {
  t.ok(refusal.detail.length > 100_000, 'a detail of the peer\'s size');
  const bytes = refusalBytes(refusal);
  t.ok(bytes.length < DETAIL_MAX + 1_024, `the whole response is ${bytes.length} bytes`);
  t.match(bytes, /^HTTP\/1\.1 502 .*X-Egress-Reason: upstream_tls_invalid/s);
  t.match(bytes, /Host: api\.test\. is not in the cert's altnames: DNS:name-0\.example\.test/, 'the start of the detail');
  t.match(bytes, /\.\.\.; /, 'and where it was cut');
});

t.test('the decision line carries a bounded detail', async (t) => {
  const { logs, sink } = captureLogs<{ detail?: string }>();
  const observer = { decision: () => undefined, sandboxDecision: () => undefined, wouldDeny: () => undefined } as unknown as ProxyObserver;
  new DecisionRecorder(observer, pino(sink), 'GET').deny(refusal);
  await new Promise((r) => setImmediate(r));
  const line = logs.find((l) => l.detail !== undefined);
  t.equal(line?.detail?.length, DETAIL_MAX);
  t.ok(line?.detail?.endsWith('...'));
});
