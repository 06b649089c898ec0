/**
 * What `capybara-sandbox logs` makes of an egress proxy's log lines (decision-format.ts,
 * log-lines.ts), on real lines: the proxy itself runs in-process on loopback and writes them
 * through its own logger (an allowed plain-HTTP request, a refusal, a tunnel and its close), and
 * the refusal-count summary comes from the proxy's own line gate. Then the hostile cases: control
 * characters and C1 codes in a logged field, fields of the wrong type, overlong lines, lines
 * that are not JSON.
 */
import http from 'node:http';
import net from 'node:net';
import { Writable } from 'node:stream';
import t from 'tap';
import { buildPolicy } from '../../../policy/index.js';
import { createEgressProxy, createLogger, createLookup } from '../../../proxy/index.js';
import { LineGate, logSuppressed } from '../../../proxy/record/index.js';
import { escapeText, formatRecord, isRefusal, jsonLine, parseLogLine, type LogRecord } from '../../../controller/operator/decision-format.js';
import { LineSplitter } from '../../../controller/operator/log-lines.js';
import { parseOperatorArgs } from '../../../controller/operator/args.js';
import { logQuery } from '../../../controller/docker/engine-logs.js';
import { runOperator } from '../../../controller/operator/index.js';
import { listen } from '../../support/loopback.js';
import { rawRequest, readUntil } from '../../support/raw-client.js';

/** Lines exactly as a logger wrote them. */
function lineSink(): { lines: string[]; sink: Writable } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(line);
      done();
    },
  });
  return { lines, sink };
}

const upstream = http.createServer((_req, res) => res.end('hello\n'));
const echo = net.createServer((s) => {
  s.on('error', () => undefined);
  s.on('data', (d: Buffer) => s.write(d));
  s.on('end', () => s.end());
});
const webPort = await listen(upstream);
const echoPort = await listen(echo);
t.teardown(() => {
  upstream.close();
  echo.close();
});

const { lines, sink } = lineSink();
const built = buildPolicy({
  allowHosts: ['web.test', { host: 'echo.test', tunnel: 'opaque' }],
  connectPorts: [webPort, echoPort],
  testHosts: { 'web.test': '127.0.0.1', 'echo.test': '127.0.0.1' },
});
if (!built.ok) throw new Error(JSON.stringify(built.problems));
const proxy = createEgressProxy({ policy: built.policy, lookup: createLookup({ servers: [], timeoutMs: 1_000 }), logger: createLogger('info', sink) });
const { port } = await proxy.listen('127.0.0.1', 0);
t.teardown(() => proxy.close());

const allowed = await rawRequest(port, `GET http://web.test:${webPort}/ HTTP/1.1\r\nHost: web.test:${webPort}\r\nConnection: close\r\n\r\n`);
allowed.socket.destroy();
const denied = await rawRequest(port, `GET http://evil.test:${webPort}/ HTTP/1.1\r\nHost: evil.test:${webPort}\r\n\r\n`);
denied.socket.destroy();
const tunnel = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: echo.test:${echoPort}\r\n\r\n`);
tunnel.socket.resume();
tunnel.socket.write('ping\n');
await readUntil(tunnel.socket, 'ping\n');
tunnel.socket.end();
await waitFor(() => lines.some((l) => l.includes('"tunnel_closed"')));

/** The one captured line of `event` (and `decision`), parsed as logs parses it. */
function captured(event: string, decision?: string): { line: string; record: LogRecord } {
  for (const line of lines) {
    const parsed = parseLogLine(line);
    if (parsed.kind === 'record' && parsed.record.event === event && (decision === undefined || parsed.record.decision === decision)) return { line, record: parsed.record };
  }
  throw new Error(`no ${event} ${decision ?? ''} line among ${lines.join('\n')}`);
}

const TIME = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';

t.test('the proxy\'s own lines, shown', async (t) => {
  t.equal(allowed.status, 200);
  t.equal(denied.reason, 'host_not_allowed');
  const rows = [
    { name: 'an allowed plain-HTTP request', event: 'decision', decision: 'allow', shown: new RegExp(`^${TIME}  allowed  GET web\\.test:${webPort}  rule web\\.test  status 200  up \\d+ B, down \\d+ B$`) },
    { name: 'a refusal', event: 'decision', decision: 'deny', shown: new RegExp(`^${TIME}  denied   GET evil\\.test:${webPort}  host_not_allowed: evil\\.test is not on the allowlist$`) },
    { name: 'an allowed tunnel', event: 'decision', decision: 'allow', which: 1, shown: new RegExp(`^${TIME}  allowed  CONNECT echo\\.test:${echoPort}  rule echo\\.test$`) },
    { name: 'a tunnel\'s close, with its bytes', event: 'tunnel_closed', shown: new RegExp(`^${TIME}  closed   echo\\.test:${echoPort}  up 5 B, down 5 B  \\d+\\.\\d s  closed by \\w+$`) },
  ];
  for (const row of rows) {
    const matching = lines.map((line) => ({ line, parsed: parseLogLine(line) })).filter(({ parsed }) =>
      parsed.kind === 'record' && parsed.record.event === row.event && (row.decision === undefined || parsed.record.decision === row.decision));
    const one = matching[row.which ?? 0];
    if (one === undefined || one.parsed.kind !== 'record') {
      t.fail(`${row.name}: no such line in ${lines.join('\n')}`);
      continue;
    }
    t.match(formatRecord(one.parsed.record), row.shown, `${row.name}: ${formatRecord(one.parsed.record)}`);
    t.equal(jsonLine(one.line, one.parsed.record), one.line, `${row.name}: --json prints the line as the proxy wrote it`);
  }
  t.ok(isRefusal(captured('decision', 'deny').record));
  t.notOk(isRefusal(captured('decision', 'allow').record));
  t.notOk(isRefusal(captured('tunnel_closed').record));
});

t.test('start-up and other lines are not decisions; what is not a JSON object is malformed', async (t) => {
  const { lines: infoLines, sink: infoSink } = lineSink();
  createLogger('info', infoSink).info({ event: 'listening', address: '0.0.0.0:3128' }, 'egress proxy listening');
  t.equal(infoLines.length, 1);
  t.same(parseLogLine(infoLines[0] ?? ''), { kind: 'other' }, 'a start-up line');
  t.same(parseLogLine('{"event":{"nested":1}}'), { kind: 'other' }, 'an event that is not a string');
  for (const bad of ['capybara-egress: --listen: bad', '[1,2]', 'null', '"decision"', '{"event":"decision"', '']) {
    t.same(parseLogLine(bad), { kind: 'malformed' }, JSON.stringify(bad));
  }
});

t.test('the refusals counted without a line: the proxy\'s summary line', async (t) => {
  const { lines: summaryLines, sink: summarySink } = lineSink();
  const gate = new LineGate({ clientPerSecond: 1, clientBurst: 1, totalPerSecond: 100, totalBurst: 100, maxClients: 16 }, () => 0);
  for (let i = 0; i < 4; i++) gate.admit('10.0.0.9', 'host_not_allowed');
  logSuppressed(gate, createLogger('info', summarySink), 'decision_lines_suppressed', 'refusals counted without a line of their own');
  const parsed = parseLogLine(summaryLines[0] ?? '');
  if (parsed.kind !== 'record') return t.fail(`not a record: ${summaryLines.join('\n')}`);
  t.ok(isRefusal(parsed.record), '--denied shows it');
  t.match(formatRecord(parsed.record), new RegExp(`^${TIME}  denied   3 more refusals, over the log-line rate, without a line of their own \\(host_not_allowed=3\\)$`));
});

t.test('hostile fields never reach the terminal raw', async (t) => {
  const base = captured('decision', 'deny').record;
  const hostile: LogRecord = { ...base, host: 'a\x1b[31mred\x07.test\u009b2J\u2028x\\x41', detail: `why\r\nforged line ${'y'.repeat(400)}`, method: 'G\x00T' };
  const shown = formatRecord(hostile);
  t.match(shown, /^[\x20-\x7e]*$/, 'printable ASCII only');
  t.ok(shown.includes('a\\x1b[31mred\\x07.test\\x9b2J\\u{2028}x\\\\x41'), `each character escaped, a backslash doubled: ${shown}`);
  t.ok(shown.includes('G\\x00T '));
  t.match(shown, /why\\x0d\\x0aforged line y+\.\.\.$/, 'the detail cut, with ...');
  t.equal(escapeText('y'.repeat(300)).length, 256 + 3);
  const json = jsonLine(JSON.stringify(hostile), hostile);
  t.match(json, /^[\x20-\x7e]*$/, '--json escapes what JSON lets stand raw');
  t.same(JSON.parse(json), hostile, 'the same record');
  const odd: LogRecord = { event: 'decision', decision: 'deny', host: { toString: 'x' }, port: [443], reason: 7, detail: null, time: 1e400 };
  t.equal(formatRecord(odd), '?  denied   ?:?  7: ?', 'fields of the wrong type are ?');
  t.equal(formatRecord({ event: 'tunnel_closed', time: 't', host: 'h', port: 1, bytesUp: -1, bytesDown: 2 }), 't  closed   h:1', 'no bytes shown unless both counts are whole numbers');
  t.match(formatRecord({ event: 'decision', decision: 'maybe', time: 't' }), /^t  maybe\?  -$/);
  t.match(formatRecord({ event: 'decision_lines_suppressed', time: 't', lines: 'many', byReason: [1] }), /^t  denied   \? more refusals.*\(\?\)$/);
});

t.test('lines: split across chunks, an overlong one dropped and counted, the last one unterminated', async (t) => {
  const got: string[] = [];
  let overlong = 0;
  const splitter = new LineSplitter((l) => got.push(l), () => (overlong += 1), 16);
  splitter.push(Buffer.from('{"a":1}\n{"b"'));
  splitter.push(Buffer.from(':2}\n' + 'x'.repeat(10)));
  splitter.push(Buffer.from('x'.repeat(10) + '\nshort\n\n'));
  splitter.push(Buffer.from('tail'));
  t.same(got, ['{"a":1}', '{"b":2}', 'short'], 'the 20-byte line is not kept; blank lines are nothing');
  t.equal(overlong, 1);
  splitter.flush();
  t.same(got.at(-1), 'tail');
  const split = new LineSplitter((l) => got.push(l), () => (overlong += 1), 16);
  const e = Buffer.from('é', 'utf8');
  split.push(e.subarray(0, 1));
  split.push(e.subarray(1));
  split.push(Buffer.from('\n'));
  t.equal(got.at(-1), 'é', 'a character split across chunks is whole');
});

t.test('the command line of logs', async (t) => {
  const follow = parseOperatorArgs(['logs', 'demo', '-f']);
  t.same([follow.command, follow.name, follow.logs, follow.force], ['logs', 'cap-demo', { follow: true, denied: false }, false], '-f is --follow to logs');
  t.same(parseOperatorArgs(['logs', '--follow', '--denied', 'cap-demo']).logs, { follow: true, denied: true });
  t.equal(parseOperatorArgs(['destroy', '-f', 'demo']).force, true, 'and still --force to destroy');
  const rows = [
    { name: 'no name', argv: ['logs'], err: /logs takes exactly one sandbox name/ },
    { name: 'two names', argv: ['logs', 'a', 'b'], err: /logs takes exactly one sandbox name/ },
    { name: '--force', argv: ['logs', 'a', '--force'], err: /--force does not apply to logs \(there -f is --follow\)/ },
    { name: 'an option of another command', argv: ['logs', 'a', '--rm'], err: /--rm does not apply to logs/ },
    { name: '--denied elsewhere', argv: ['ls', '--denied'], err: /--denied does not apply to ls \(only to logs\)/ },
    { name: 'a command after --', argv: ['logs', 'a', '--', 'ls'], err: /"--" is only used by exec and run/ },
    { name: 'a bad name', argv: ['logs', 'a b'], err: /is not a sandbox resource name/ },
  ];
  for (const row of rows) {
    let stderr = '';
    const code = await runOperator(['--endpoint', 'unix:///nonexistent.sock', ...row.argv], { stdout: () => undefined, stderr: (x) => { stderr += x; } });
    t.equal(code, 2, `${row.name}: a usage error`);
    t.match(stderr, row.err, row.name);
  }
});

t.test('the log read asks for both streams, and since a moment to the nanosecond digits Docker reads', async (t) => {
  t.same(logQuery({ follow: false }), { stdout: true, stderr: true, follow: false });
  t.same(logQuery({ follow: true, sinceMs: 1_700_000_000_123 }), { stdout: true, stderr: true, follow: true, since: '1700000000.123000000' });
  t.same(logQuery({ follow: true, sinceMs: 1_700_000_000_007.9 }).since, '1700000000.007000000');
});

async function waitFor(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

t.test('report mode: a line the proxy marked would_deny says so, and names no rule it did not match', async (t) => {
  const { startTestProxy } = await import('../../support/test-proxy.js');
  const report = await startTestProxy({ policy: { allowHosts: ['web.test'], connectPorts: [443], testHosts: { 'new.test': '127.0.0.1', 'web.test': '127.0.0.1' }, mode: 'report' } });
  t.teardown(() => report.close());
  for (const host of ['new.test', 'web.test']) {
    const res = await rawRequest(report.port, `GET http://${host}:${webPort}/ HTTP/1.1\r\nHost: ${host}:${webPort}\r\nConnection: close\r\n\r\n`);
    res.socket.destroy();
    t.equal(res.status, 200);
  }
  const shown = report.logs.filter((l) => l.event === 'decision').map((l) => formatRecord(l as LogRecord));
  t.match(shown[0], new RegExp(`^${TIME}  allowed  GET new\\.test:${webPort}  would_deny host_not_allowed  status 200  `), 'off the allowlist');
  t.match(shown[1], new RegExp(`^${TIME}  allowed  GET web\\.test:${webPort}  rule web\\.test  would_deny port_not_allowed  status 200  `), 'listed, on a port off the list');
  t.match(formatRecord({ event: 'decision', decision: 'deny', time: 'T', host: 'x.test', port: 443, reason: 'sni_mismatch', detail: 'd', would_deny: 'host_not_allowed' }), /sni_mismatch: d  would_deny host_not_allowed$/);
});
