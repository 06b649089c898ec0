/**
 * The report's reading of decision lines, on lines as the proxy writes them and on hostile ones:
 * what is listed, what is only summed up, what is malformed, the caps, and a result the policy's
 * own parser takes. (The command on a real proxy's log is report-cli.test.ts's.)
 */
import { Readable } from 'node:stream';
import t from 'tap';
import { buildPolicy, parsePolicyText } from '../../policy/index.js';
import { AllowlistReport, readLines, REPORT_LIMITS } from '../../proxy/report/index.js';

const line = (fields: Record<string, unknown>): string => JSON.stringify({ level: 30, time: '2026-12-03T00:00:00.000Z', service: 'capybara-egress', conn: 1, event: 'decision', ...fields });

function reportOf(lines: readonly string[]): { text: string; report: AllowlistReport } {
  const report = new AllowlistReport();
  for (const l of lines) report.add(l);
  return { text: report.render('run.log'), report };
}

function policyFrom(text: string) {
  const file = parsePolicyText(text, 'report');
  const built = buildPolicy({ allowHosts: file.allowHosts, connectPorts: file.connectPorts, mode: file.mode });
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  return built.policy;
}

t.test('hosts allowed, would-deny, and refused for the allowlist in an enforce log are listed, sorted, with what was seen', async (t) => {
  const { text, report } = reportOf([
    line({ decision: 'allow', method: 'CONNECT', host: 'registry.npmjs.org', port: 443, rule: '*.npmjs.org', tunnel: 'tls' }),
    line({ decision: 'allow', method: 'CONNECT', host: 'api.github.com', port: 443, would_deny: 'host_not_allowed', tunnel: 'tls' }),
    line({ decision: 'allow', method: 'CONNECT', host: 'api.github.com', port: 443, would_deny: 'host_not_allowed', tunnel: 'tls' }),
    line({ decision: 'deny', reason: 'host_not_allowed', detail: 'x', method: 'CONNECT', host: 'pypi.org', port: 443 }),
    line({ decision: 'deny', reason: 'dns_not_allowed', method: 'DNS', host: 'files.pythonhosted.org', via: 'transparent' }),
    line({ decision: 'allow', method: 'CONNECT', host: 'git.example', port: 22, would_deny: 'host_not_allowed', tunnel: 'opaque' }),
    line({ event: 'listening', address: '127.0.0.1:3128' }).replace('"event":"decision",', ''),
  ]);
  t.same(report.counts, { lines: 7, decisions: 6, malformed: 0, droppedHosts: 0 });
  const entries = text.split('\n').filter((l) => l.startsWith('  - '));
  t.same(entries, [
    '  - "api.github.com" # 2 requests; 2 would_deny; port 443',
    '  - "files.pythonhosted.org" # 1 request; 1 would_deny',
    '  - { host: "git.example", tunnel: opaque } # 1 request; 1 would_deny; port 22',
    '  - "pypi.org" # 1 request; 1 would_deny; port 443',
    '  - "registry.npmjs.org" # 1 request; 1 allowed by *.npmjs.org; port 443',
  ]);
  t.match(text, /^connectPorts: \[22, 443\]$/m, 'a port other than the defaults: the ports seen');
  t.match(text, /^mode: enforce$/m, 'a file to enforce');
  const policy = policyFrom(text);
  t.same([...policy.allowHosts], ['api.github.com', 'files.pythonhosted.org', 'git.example', 'pypi.org', 'registry.npmjs.org']);
  t.equal(policy.allowlist.match('git.example')?.tunnel, 'opaque');
});

t.test('only default ports: no connectPorts (the default applies); nothing seen: an empty list', async (t) => {
  const { text } = reportOf([line({ decision: 'allow', host: 'a.example', port: 80, rule: 'a.example' }), line({ decision: 'allow', host: 'b.example', port: 443, rule: 'b.example' })]);
  t.notMatch(text, /connectPorts/);
  const empty = reportOf(['{"event":"listening"}']);
  t.match(empty.text, /^allowHosts: \[\]$/m);
  t.equal(empty.report.counts.decisions, 0);
  t.same([...policyFrom(empty.text).allowHosts], []);
});

t.test('refusals no entry lifts are summed up in comments, never listed', async (t) => {
  const { text } = reportOf([
    line({ decision: 'deny', reason: 'address_not_allowed', host: 'internal.example', port: 443 }),
    line({ decision: 'deny', reason: 'address_not_allowed', host: 'internal.example', port: 443 }),
    line({ decision: 'deny', reason: 'ip_literal', port: 443 }),
    line({ decision: 'deny', reason: 'sni_mismatch', host: 'cdn.example', port: 443 }),
    line({ decision: 'deny', reason: 'bad_request' }),
    // Allowed by report mode, then refused by the hello check: listed, with what happened.
    line({ decision: 'deny', reason: 'sni_mismatch', host: 'fronted.example', port: 443, would_deny: 'host_not_allowed' }),
  ]);
  t.same(text.split('\n').filter((l) => l.startsWith('  - ')), ['  - "fronted.example" # 1 request; 1 would_deny; port 443; then refused: sni_mismatch x1']);
  t.match(text, /^# Refused in every mode[^\n]*\n#   \(no host name\): ip_literal x1, bad_request x1\n#   cdn\.example: sni_mismatch x1\n#   internal\.example: address_not_allowed x2$/m);
});

t.test('hostile and broken lines: counted as malformed or refused, never written as an entry', async (t) => {
  const { text, report } = reportOf([
    'not json',
    '[1,2]',
    'null',
    '{"event":"decision","decision":"allow","host":"a.example","port":"443"}',
    '{"event":"decision","decision":"allow","host":"a.example","port":70000}',
    '{"event":"decision","decision":"maybe","host":"a.example"}',
    '{"event":"decision","decision":"allow","host":42}',
    '{"event":"decision","decision":"deny","reason":"x\\nallowHosts: [evil.example]","host":"b.example"}',
    '{"event":"decision","decision":"allow","host":"c.example","would_deny":"host_not_allowed\\n- evil.example"}',
    line({ decision: 'allow', host: 'evil.example\nallowHosts: [x]', port: 443 }),
    line({ decision: 'allow', host: '10.0.0.1', port: 443 }),
    line({ decision: 'allow', host: '*.example.com', port: 443 }),
    line({ decision: 'allow', host: 'true', port: 443, rule: 'x\n- evil.example' }),
  ]);
  t.equal(report.counts.malformed, 9, 'nine lines the proxy never writes');
  const policy = policyFrom(text);
  t.same([...policy.allowHosts], ['true'], 'only a host name the proxy itself would take; "true" stays a string');
  t.notMatch(text, /^[^#]*evil/m, 'no text from a line outside a comment but the checked host');
  t.match(text, /^#   evil\.example\?allowHosts: \[x\]: malformed_host x1$/m, 'a host with a line break, made printable in its comment');
  t.match(text, /#   10\.0\.0\.1: ip_literal x1/);
  t.match(text, /allowed by x\?- evil\.example/, 'a rule name is made printable');
});

t.test('caps: hosts held, and lines read; a line cut across reads, or without an end, is still one line', async (t) => {
  const report = new AllowlistReport();
  for (let i = 0; i < REPORT_LIMITS.maxHosts + 5; i++) report.add(line({ decision: 'allow', host: `h${i}.example`, port: 443, rule: 'x' }));
  t.equal(report.counts.droppedHosts, 5);
  const text = report.render('big.log');
  t.equal(text.split('\n').filter((l) => l.startsWith('  - ')).length, REPORT_LIMITS.maxHosts);
  t.match(text, /^# INCOMPLETE: 5 lines named hosts past the first 10000/m);

  const read = new AllowlistReport();
  const first = line({ decision: 'allow', host: 'split.example', port: 443, rule: 'split.example' });
  const long = line({ decision: 'allow', host: 'long.example', port: 443, detail: 'x'.repeat(400) });
  const chunks = [first.slice(0, 10), `${first.slice(10)}\n${long.slice(0, 50)}`, `${long.slice(50)}\r\n`, line({ decision: 'allow', host: 'last.example', port: 443 })];
  await readLines(Readable.from(chunks.map((c) => Buffer.from(c))), read, 300);
  t.same(read.counts, { lines: 3, decisions: 2, malformed: 1, droppedHosts: 0 }, 'the long line is malformed; the last has no newline');
  t.same([...policyFrom(read.render('x')).allowHosts], ['last.example', 'split.example']);
});

t.test('what one host holds is capped too: its ports in the comment, and reasons only from the catalog', async (t) => {
  // A run in report mode can ask for one name on every port (connect_failed lines carry
  // would_deny and the port): the comment named each, a set per host the log could grow to
  // 65,535 entries, 10,000 times over.
  const lines = Array.from({ length: 2000 }, (_, i) =>
    line({ decision: 'deny', reason: 'connect_failed', host: 'ports.example', port: 1000 + i, would_deny: 'port_not_allowed' }),
  );
  // Codes no proxy writes: each was a new key in the host's tally of refusals.
  for (let i = 0; i < 50; i++) lines.push(line({ decision: 'deny', reason: `made_up_${'x'.repeat(i % 26)}`, host: 'ports.example', port: 443, would_deny: 'host_not_allowed' }));
  lines.push(line({ decision: 'allow', host: 'odd.example', port: 443, would_deny: 'tunnel_not_allowed' }));
  const { text, report } = reportOf(lines);
  t.equal(report.counts.malformed, 51, 'a reason or would_deny outside the catalog: no decision line of the proxy');
  const entry = text.split('\n').find((l) => l.startsWith('  - "ports.example"'));
  t.ok(entry !== undefined && entry.length < 300, `the entry's comment stays short (${entry?.length ?? 0} characters)`);
  t.match(entry, /2000 requests; 2000 would_deny; port 1000, 1001, .*, 1015 \(and 1984 requests on other ports\); then refused: connect_failed x2000$/);
  t.notMatch(text, /made_up|odd\.example/);
  t.same([...policyFrom(text).connectPorts].length, 2000, 'connectPorts still lists every port used');
});
