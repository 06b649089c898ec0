/**
 * A shared proxy (--tenants-dir, proxy/tenants/) on loopback: 127.0.0.0/8 is all local, so each
 * "sandbox network" is a /28 of it, the proxy listens on every address, and a client binds its
 * source address inside its network. Identity by both addresses, each sandbox under its own
 * policy, live changes closing what is no longer allowed, lifecycle fencing of a reused subnet,
 * bad files failing closed, and shares kept per sandbox.
 */
import t, { type Test } from 'tap';
import dgram from 'node:dgram';
import net from 'node:net';
import tls from 'node:tls';
import dnsPacket from 'dns-packet';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createLogger, type EgressProxy } from '../../proxy/index.js';
import { MAX_SLOTS, openTenants } from '../../proxy/tenants/index.js';
import type { AllowEntry } from '../../policy/index.js';
import { captureHello } from '../support/tls-hello.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { rawRequest, readUntil, type RawResponse } from '../support/raw-client.js';
import { freePort, listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';
import { captureLogs } from '../support/log-capture.js';
import { ALLOWED_LINES, REFUSAL_LINES } from '../../proxy/record/decisions.js';

const A = { subnet: '127.0.1.0/28', proxy: '127.0.1.1', client: '127.0.1.5' };
const B = { subnet: '127.0.2.0/28', proxy: '127.0.2.1', client: '127.0.2.5' };

/** The proxy's address on a test network: its first host address. */
const proxyOf = (subnet: string): string => subnet.replace(/\.0\/28$/, '.1');

interface Setup {
  readonly port: number;
  readonly echo: number;
  readonly logs: Record<string, unknown>[];
  register(slot: string, sandbox: string, lifecycle: string, subnet: string, allowHosts: AllowEntry[]): void;
  write(slot: string, text: string): void;
  readonly dir: string;
  readonly proxy: EgressProxy;
  readonly tenants: ReturnType<typeof openTenants>['tenants'];
}

async function setup(t: Test, limits: { maxConnections?: number; maxConnectionsPerClient?: number } = {}, rate = { perSecond: 1_000, burst: 1_000 }): Promise<Setup> {
  const echo = net.createServer((s) => {
    s.on('error', () => s.destroy());
    s.pipe(s);
  });
  const echoPort = await listen(echo);
  const dir = mkdtempSync(join(tmpdir(), 'tenants-'));
  const write = (slot: string, text: string): void => putSlot(dir, slot, text);
  const register = (slot: string, sandbox: string, lifecycle: string, subnet: string, allowHosts: AllowEntry[]): void =>
    write(slot, JSON.stringify({ version: 1, sandbox, lifecycle, subnet, address: proxyOf(subnet), policy: { allowHosts, connectPorts: [echoPort] } }));
  const { logs, sink } = captureLogs();
  const logger = createLogger('debug', sink);
  const pins = { 'a.test': '127.0.0.1', 'b.test': '127.0.0.1', 'c.test': '127.0.0.1' };
  t.teardown(() => echo.close());
  // On every address of the machine: a connection's local address is its sandbox network's.
  const { proxy, shared, port } = await startSharedProxy(t, dir, logger, { testHosts: pins, rate, limits: { maxConnections: 64, maxConnectionsPerClient: 16, ...limits } });
  return { port, echo: echoPort, logs, register, write, dir, proxy, tenants: shared.tenants };
}

function connect(s: Setup, from: { proxy: string; client: string }, host: string, client = from.client): Promise<RawResponse> {
  return rawRequest(s.port, `CONNECT ${host}:${s.echo} HTTP/1.1\r\nHost: ${host}:${s.echo}\r\n\r\n`, from.proxy, 5_000, client);
}

/** A tunnel that carries bytes both ways now. */
async function carries(r: RawResponse): Promise<boolean> {
  r.socket.write('ping\n');
  return (await readUntil(r.socket, 'ping\n', 2_000).catch(() => '')).includes('ping');
}

/** Resolves when the proxy closed it (read on: a paused socket never sees the end). */
const closed = (socket: net.Socket): Promise<void> =>
  new Promise((resolve) => {
    if (socket.destroyed || socket.readableEnded) return resolve();
    // The client allows half-open connections: the proxy's close is its end.
    socket.once('end', () => resolve());
    socket.once('close', () => resolve());
    socket.on('data', () => undefined);
    socket.resume();
  });

t.test('each sandbox is decided by its own registration, found by both addresses', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['b.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const a = await connect(s, A, 'a.test');
  t.equal(a.status, 200, 'a reaches its host');
  t.ok(await carries(a));
  a.socket.destroy();
  t.equal((await connect(s, B, 'a.test')).reason, 'host_not_allowed', 'b does not reach a\'s host');
  t.equal((await connect(s, B, 'b.test')).status, 200, 'b reaches its own');
  t.equal((await connect(s, A, 'b.test')).reason, 'host_not_allowed');
  const metrics = await s.proxy.metrics.metrics();
  t.match(metrics, /egress_sandbox_decisions_total\{sandbox="cap-a",outcome="allow"\} 1\b/, 'the metric names the sandbox');
  t.match(metrics, /egress_sandbox_decisions_total\{sandbox="cap-b",outcome="deny"\} 1\b/);
  s.write('slot-b', '{"version": 1, "vacant": true}');
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 3, 'b vacant');
  t.notMatch(await s.proxy.metrics.metrics(), /sandbox="cap-b"/, 'a sandbox gone takes its series with it');
  const line = s.logs.find((l) => l.decision === 'allow' && l.host === 'a.test');
  t.equal(line?.sandbox, 'cap-a', 'the decision line names the sandbox');
  t.equal(s.logs.find((l) => l.decision === 'deny' && l.host === 'a.test')?.sandbox, 'cap-b');
});

t.test('each sandbox\'s tunnels, bytes and refusals are counted by it, and only while it is registered', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['b.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const a = await connect(s, A, 'a.test');
  t.ok(await carries(a));
  t.match(await s.proxy.metrics.metrics(), /egress_sandbox_open_tunnels\{sandbox="cap-a"\} 1\n/, 'a\'s open tunnel');
  t.notMatch(await s.proxy.metrics.metrics(), /egress_sandbox_open_tunnels\{sandbox="cap-b"\}/, 'none of b\'s');
  a.socket.destroy();
  await settle(() => s.logs.some((l) => l.event === 'tunnel_closed'), 'the tunnel closed');
  t.equal((await connect(s, B, 'a.test')).reason, 'host_not_allowed');
  const text = await s.proxy.metrics.metrics();
  t.match(text, /egress_sandbox_bytes_total\{sandbox="cap-a",direction="up"\} 5\n/, 'a\'s bytes up: ping and a newline');
  t.match(text, /egress_sandbox_bytes_total\{sandbox="cap-a",direction="down"\} 5\n/);
  t.notMatch(text, /egress_sandbox_bytes_total\{sandbox="cap-b"/, 'b relayed nothing');
  t.notMatch(text, /egress_sandbox_open_tunnels\{sandbox="cap-a"\}/, 'a has none open now');
  t.match(text, /egress_sandbox_denials_total\{sandbox="cap-b",reason="host_not_allowed"\} 1\n/, 'b\'s refusal by its reason');
  t.notMatch(text, /egress_sandbox_denials_total\{sandbox="cap-a"/);
  s.write('slot-a', '{"version": 1, "vacant": true}');
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 3, 'a vacant');
  t.notMatch(await s.proxy.metrics.metrics(), /sandbox="cap-a"/, 'a\'s registration ended: none of its series left');
  t.match(await s.proxy.metrics.metrics(), /sandbox="cap-b"/, 'b\'s kept');
  // b registered again under the same name in one rewrite (a new lifecycle): its counts start anew.
  s.register('slot-b', 'cap-b', 'life-b-0002', B.subnet, ['b.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 4, 'b again');
  t.notMatch(await s.proxy.metrics.metrics(), /sandbox="cap-b"/, 'a new registration of b: none of the earlier one\'s counts');
  t.equal((await connect(s, B, 'a.test')).reason, 'host_not_allowed');
  t.match(await s.proxy.metrics.metrics(), /egress_sandbox_denials_total\{sandbox="cap-b",reason="host_not_allowed"\} 1\n/, 'counted from one');
});

t.test('a connection no registered network holds both ends of is unknown_client', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const cases: Array<[{ proxy: string; client: string }, string]> = [
    [{ proxy: '127.0.3.1', client: '127.0.3.5' }, 'an unregistered network'],
    [{ proxy: B.proxy, client: A.client }, 'a client of a on b\'s address'],
    [{ proxy: A.proxy, client: B.client }, 'a client of b on a\'s address'],
    [{ proxy: A.proxy, client: '127.0.1.77' }, 'a source just outside a\'s /28'],
  ];
  for (const [from, what] of cases) {
    const r = await connect(s, from, 'a.test');
    t.same([r.status, r.reason], [403, 'unknown_client'], what);
  }
  t.ok(s.logs.some((l) => l.reason === 'unknown_client' && typeof l.detail === 'string'), 'logged with why');
});

t.test('the health answer names the sandbox of a registered network, and no sandbox to anyone else', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'a registered');
  const health = (from: { proxy: string; client: string }): Promise<RawResponse> =>
    rawRequest(s.port, 'GET /healthz HTTP/1.1\r\nHost: egress\r\nConnection: close\r\n\r\n', from.proxy, 5_000, from.client);
  const a = await health(A);
  t.equal(a.status, 200);
  t.match(a.head, /\r\nX-Egress-Sandbox: cap-a; lifecycle=life-a-0001\r\n/, 'a client of a: its sandbox and registration');
  for (const [from, what] of [[B, 'an unregistered network'], [{ proxy: A.proxy, client: B.client }, 'a client of b on a\'s address']] as const) {
    const r = await health(from);
    t.equal(r.status, 200, `${what}: the process is healthy`);
    t.notMatch(r.head, /X-Egress-Sandbox/i, `${what}: no sandbox named`);
  }
  s.write('slot-a', '{"version": 1, "vacant": true}');
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'a vacant');
  t.notMatch((await health(A)).head, /X-Egress-Sandbox/i, 'a vacant registration: no sandbox named');
  s.register('slot-a', 'cap-a', 'life-a-0002', A.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 3, 'a again');
  t.match((await health(A)).head, /\r\nX-Egress-Sandbox: cap-a; lifecycle=life-a-0002\r\n/, 'the same sandbox registered again: its new registration');
});

t.test('an allowlist change closes the tunnels it no longer allows and reaches new connections', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test', 'b.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const toA = await connect(s, A, 'a.test');
  const toB = await connect(s, A, 'b.test');
  t.same([toA.status, toB.status], [200, 200]);
  const changed = performance.now();
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['b.test', 'c.test']);
  // The change is in force within a poll period (POLL_MS) on a quiet machine; the bound leaves a
  // loaded one a few seconds more, and is still far below the idle timeout (five minutes here),
  // which is all that would close a tunnel the change left open.
  await Promise.race([closed(toA.socket), new Promise((r) => setTimeout(r, 5_000))]);
  const took = performance.now() - changed;
  t.ok(toA.socket.destroyed || toA.socket.readableEnded, `the tunnel to a.test is closed (${Math.round(took)} ms after the change)`);
  t.ok(took < 4_000, 'within the poll period and some');
  t.ok(await carries(toB), 'the tunnel to b.test, still allowed, goes on');
  toB.socket.destroy();
  t.equal((await connect(s, A, 'a.test')).reason, 'host_not_allowed', 'a new connection gets the new list');
  t.equal((await connect(s, A, 'c.test')).status, 200);
  t.ok(s.logs.some((l) => l.event === 'revoked' && l.reason === 'policy_revoked' && l.host === 'a.test' && l.sandbox === 'cap-a'), 'the closure has its line');
});

t.test('a tunnel an allowlist change closes is closed to its upstream too, and its closing line says why', async (t) => {
  const s = await setup(t);
  // An upstream that keeps its side open after the proxy's end (as a server that ignores a half-close).
  let accepted = 0;
  const holder = net.createServer({ allowHalfOpen: true }, (socket) => {
    socket.on('error', () => undefined);
    socket.resume();
    accepted += 1;
  });
  const holdPort = await listen(holder);
  t.teardown(() => holder.close());
  const register = (allowHosts: string[]): void =>
    s.write('slot-a', JSON.stringify({ version: 1, sandbox: 'cap-a', lifecycle: 'life-a-0001', subnet: A.subnet, address: A.proxy, policy: { allowHosts, connectPorts: [holdPort] } }));
  register(['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const open = await rawRequest(s.port, `CONNECT a.test:${holdPort} HTTP/1.1\r\nHost: a.test:${holdPort}\r\n\r\n`, A.proxy, 5_000, A.client);
  t.equal(open.status, 200);
  await settle(() => accepted === 1, 'the upstream accepted');
  register(['b.test']);
  await Promise.race([closed(open.socket), new Promise((r) => setTimeout(r, 4_000))]);
  t.ok(open.socket.destroyed || open.socket.readableEnded, 'the client side is closed');
  // The line is written once both sides are closed: the proxy's upstream socket too, not left
  // half-open (FIN sent, its end awaited) until the idle timeout, five minutes here.
  const ended = await settle(() => s.logs.some((l) => l.event === 'tunnel_closed'), 'the tunnel\'s closing line').then(() => true, () => false);
  t.ok(ended, 'the upstream side is closed too: the tunnel ended');
  t.match(s.logs.find((l) => l.event === 'tunnel_closed'), { host: 'a.test', sandbox: 'cap-a', closedBy: 'policy_revoked' }, 'its closing line, closed by the change');
  open.socket.destroy();
});

t.test('an allowlist change that allows a listed host no tunnel, or no opaque one, closes the tunnels open to it', async (t) => {
  // The sandbox's entries are opaque unless they say otherwise (the setup's tunnel default).
  const rows: Array<{ name: string; after: AllowEntry[]; closed: RegExp | undefined; fresh: string }> = [
    { name: 'the entry gains method rules, which allow no tunnel', after: [{ host: 'a.test', methods: ['GET'] }, 'b.test'], closed: /allows no tunnel/, fresh: 'tunnel_not_allowed' },
    { name: 'the entry gains path rules', after: [{ host: 'a.test', paths: ['/x'] }, 'b.test'], closed: /allows no tunnel/, fresh: 'tunnel_not_allowed' },
    { name: 'the entry becomes tls: the open tunnel\'s hello was never checked', after: [{ host: 'a.test', tunnel: 'tls' }, 'b.test'], closed: /opened opaque/, fresh: '200' },
    { name: 'another entry gains rules: the tunnel stays', after: ['a.test', { host: 'b.test', methods: ['GET'] }], closed: undefined, fresh: '200' },
  ];
  for (const row of rows) {
    await t.test(row.name, async (t) => {
      const s = await setup(t);
      s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test', 'b.test']);
      await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
      const open = await connect(s, A, 'a.test');
      t.ok(open.status === 200 && (await carries(open)), 'a plain tunnel to a.test, opened opaque');
      s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, row.after);
      await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'the change');
      const fresh = await connect(s, A, 'a.test');
      fresh.socket.destroy();
      t.equal(fresh.reason ?? String(fresh.status), row.fresh, 'a new tunnel gets the new list');
      if (row.closed === undefined) {
        // The recheck runs at once when the list changes: by now it has passed this tunnel by.
        t.ok(await carries(open), 'the tunnel, still allowed as it was opened, goes on');
        t.notOk(s.logs.some((l) => l.event === 'revoked'), 'no revocation');
      } else {
        await Promise.race([closed(open.socket), new Promise((r) => setTimeout(r, 3_000))]);
        t.ok(open.socket.destroyed || open.socket.readableEnded, 'the tunnel is closed');
        const line = s.logs.find((l) => l.event === 'revoked');
        t.match(line, { reason: 'policy_revoked', host: 'a.test', sandbox: 'cap-a' }, 'the closure has its line');
        t.match(String(line?.detail), row.closed, 'which says why');
      }
      open.socket.destroy();
    });
  }
});

t.test('an allowlist change whose entry allows no tunnel closes a transparent TLS tunnel open to it', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const tlsPort = await freePort();
  await s.proxy.listenTransparent({ listen: '0.0.0.0', answer: '0.0.0.0', ports: [{ kind: 'tls', dialled: s.echo, listen: tlsPort }] });
  const hello = await captureHello({ servername: 'a.test', rejectUnauthorized: false });
  const open = net.connect({ host: A.proxy, port: tlsPort, localAddress: A.client });
  open.on('error', () => undefined);
  await new Promise((r) => open.once('connect', r));
  open.write(hello);
  // The echo upstream sends the hello back once the tunnel is open.
  const back = await readUntil(open, hello.subarray(-8).toString('latin1'), 3_000).catch(() => '');
  t.ok(back.length >= hello.length, 'a transparent tunnel to a.test');
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, [{ host: 'a.test', methods: ['GET'] }]);
  await Promise.race([closed(open), new Promise((r) => setTimeout(r, 3_000))]);
  t.ok(open.destroyed || open.readableEnded, 'the tunnel is closed');
  t.match(String(s.logs.find((l) => l.event === 'revoked')?.detail), /allows no tunnel/);
  open.destroy();
});

t.test('a slot taken by a later sandbox whose registration is refused serves nobody: the earlier one is not served on', async (t) => {
  const rows: Array<{ name: string; sandbox: string; lifecycle: string }> = [
    { name: 'another sandbox', sandbox: 'cap-z', lifecycle: 'life-z-0002' },
    { name: 'the same sandbox under a new lifecycle id', sandbox: 'cap-a', lifecycle: 'life-a-0002' },
  ];
  for (const row of rows) {
    await t.test(row.name, async (t) => {
      const s = await setup(t);
      s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
      await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
      const old = await connect(s, A, 'a.test');
      t.equal(old.status, 200);
      // A list the shared proxy refuses to build (an inspected entry), in an envelope that parses.
      s.register('slot-a', row.sandbox, row.lifecycle, A.subnet, [{ host: 'a.test', inspect: true }]);
      await Promise.race([closed(old.socket), new Promise((r) => setTimeout(r, 3_000))]);
      t.ok(old.socket.destroyed || old.socket.readableEnded, 'the earlier registration\'s tunnel is closed');
      t.match(String(s.logs.find((l) => l.event === 'tenant_refused')?.detail), new RegExp(`; it registers sandbox ${row.sandbox} \\(lifecycle ${row.lifecycle}\\) in place of cap-a \\(lifecycle life-a-0001\\), so the slot serves nobody$`), 'the refusal says why the slot serves nobody');
      t.ok(s.logs.some((l) => l.event === 'revoked' && String(l.detail).includes('registration of sandbox cap-a ended')), 'the closure has its line');
      t.equal((await connect(s, A, 'a.test')).reason, 'unknown_client', 'a new connection is served under no policy');
      const health = await rawRequest(s.port, 'GET /healthz HTTP/1.1\r\nHost: egress\r\nConnection: close\r\n\r\n', A.proxy, 5_000, A.client);
      t.notMatch(health.head, /X-Egress-Sandbox/i, 'the health answer names no sandbox');
    });
  }
});

t.test('a subnet taken by a later sandbox: the earlier one\'s connections are closed, its policy never served', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const old = await connect(s, A, 'a.test');
  t.equal(old.status, 200);
  // Destroyed and, at once, the same network given to another sandbox with the same list.
  s.register('slot-a', 'cap-z', 'life-z-0002', A.subnet, ['a.test']);
  await Promise.race([closed(old.socket), new Promise((r) => setTimeout(r, 3_000))]);
  t.ok(old.socket.destroyed || old.socket.readableEnded, 'the earlier sandbox\'s tunnel is closed though the list is the same');
  const fresh = await connect(s, A, 'a.test');
  t.equal(fresh.status, 200, 'the later sandbox is served');
  fresh.socket.destroy();
  t.ok(s.logs.some((l) => l.event === 'revoked' && typeof l.detail === 'string' && l.detail.includes('registration of sandbox cap-a ended')));
  t.equal(s.logs.filter((l) => l.decision === 'allow').at(-1)?.sandbox, 'cap-z');
});

t.test('vacant, removed, invalid and linked files fail closed', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  s.write('slot-a', '{"version": 1, "sandbox": "cap-a", "policy": ');
  await settle(() => s.logs.some((l) => l.event === 'tenant_refused'), 'the bad file is seen');
  t.match(String(s.logs.find((l) => l.event === 'tenant_refused')?.detail), /slot-a\.json.*cap-a keeps its previous policy/s);
  t.equal((await connect(s, A, 'a.test')).status, 200, 'a bad file keeps the previous registration');
  s.write('slot-b', JSON.stringify({ version: 1, sandbox: 'cap-b', lifecycle: 'life-b-0001', subnet: B.subnet, address: B.proxy, policy: { allowHosts: ['*.com'] } }));
  await settle(() => s.logs.filter((l) => l.event === 'tenant_refused').length >= 2, 'the second bad file is seen');
  t.equal((await connect(s, B, 'a.test')).reason, 'unknown_client', 'a new slot with a bad file serves nobody');
  s.write('slot-b', JSON.stringify({ version: 1, sandbox: 'cap-b', lifecycle: 'life-b-0001', subnet: B.subnet, address: B.proxy, policy: { allowHosts: [{ host: 'a.test', inspect: true }] } }));
  await settle(() => s.logs.filter((l) => l.event === 'tenant_refused').length >= 3, 'the inspected entry is refused');
  t.match(String(s.logs.filter((l) => l.event === 'tenant_refused').at(-1)?.detail), /not served by a shared egress proxy yet/);

  const open = await connect(s, A, 'a.test');
  s.write('slot-a', '{"version": 1, "vacant": true}');
  await Promise.race([closed(open.socket), new Promise((r) => setTimeout(r, 3_000))]);
  t.ok(open.socket.destroyed || open.socket.readableEnded, 'vacant: its open tunnel is closed');
  t.equal((await connect(s, A, 'a.test')).reason, 'unknown_client', 'vacant: nobody is served');

  s.register('slot-a', 'cap-a', 'life-a-0003', A.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 3, 'registered again');
  rmSync(join(s.dir, 'slot-a.json'));
  const removed = Date.now();
  let reason: string | undefined;
  while (reason !== 'unknown_client' && Date.now() - removed < 3_000) {
    const r = await connect(s, A, 'a.test').catch(() => undefined);
    r?.socket.destroy();
    reason = r?.reason;
  }
  t.equal(reason, 'unknown_client', 'removed: nobody is served');

  writeFileSync(join(s.dir, 'real.txt'), JSON.stringify({ version: 1, sandbox: 'cap-a', lifecycle: 'life-a-0004', subnet: A.subnet, address: A.proxy, policy: { allowHosts: ['a.test'], connectPorts: [s.echo] } }));
  symlinkSync(join(s.dir, 'real.txt'), join(s.dir, 'slot-l.json'));
  await settle(() => s.logs.some((l) => l.event === 'tenant_refused' && String(l.detail).includes('symbolic link')), 'the link is refused');
  t.equal((await connect(s, A, 'a.test')).reason, 'unknown_client', 'a registration behind a symbolic link is never read');
});

t.test('more files than MAX_SLOTS: a registration in force, or written later, whatever its name, is still served', async (t) => {
  // A shard's volume keeps a vacant file for every subnet its sandboxes ever had (nothing deletes
  // one), so with an address pool of more than MAX_SLOTS subnets (a /16 in /29s holds 8,192) the
  // files pass MAX_SLOTS in time. Before, only the first MAX_SLOTS by name were read: a sandbox
  // whose slot sorted after them lost its registration, and a new one was never served.
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  for (let k = 0; k <= MAX_SLOTS; k++) writeFileSync(join(s.dir, `10.213.${k >> 8}.${k & 255}_29.json`), '{"version":1,"vacant":true}\n');
  await settle(() => s.logs.some((l) => l.event === 'tenant_refused' && String(l.detail).includes(`over ${MAX_SLOTS}`)), 'the directory past MAX_SLOTS');
  await new Promise((r) => setTimeout(r, 1_500));
  t.equal((await connect(s, A, 'a.test')).status, 200, 'the registration in force stays');
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered' && l.sandbox === 'cap-b'), 'a later registration is read', 10_000);
  t.equal((await connect(s, B, 'a.test')).status, 200, 'and served');
});

t.test('the connection share is the sandbox\'s, whatever addresses it uses', async (t) => {
  const s = await setup(t, { maxConnections: 64, maxConnectionsPerClient: 3 });
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const held: RawResponse[] = [];
  for (const client of ['127.0.1.5', '127.0.1.6', '127.0.1.7']) held.push(await connect(s, A, 'a.test', client));
  t.same(held.map((r) => r.status), [200, 200, 200]);
  const fourth = await connect(s, A, 'a.test', '127.0.1.8');
  t.same([fourth.status, fourth.reason], [429, 'client_limit'], 'a fourth address of the same sandbox is over its share');
  t.match(String(s.logs.find((l) => l.reason === 'client_limit')?.detail), /sandbox cap-a/);
  t.match(await s.proxy.metrics.metrics(), /egress_sandbox_denials_total\{sandbox="cap-a",reason="client_limit"\} 1\n/, 'a refusal at the limits is counted by the sandbox too');
  // Over its share, its health check is still answered in the check's own slots, naming it.
  const health = await rawRequest(s.port, 'GET /healthz HTTP/1.1\r\nHost: egress\r\n\r\n', A.proxy, 5_000, '127.0.1.9');
  t.equal(health.status, 200);
  t.match(health.head, /\r\nX-Egress-Sandbox: cap-a; lifecycle=life-a-0001\r\n/, 'over its share: the health answer still names it');
  const other = await connect(s, B, 'a.test');
  t.equal(other.status, 200, 'another sandbox is not starved');
  for (const r of [...held, other]) r.socket.destroy();
});

/** One A query for `name` from `from` to `to:port`; the answer's rcode and addresses, or none. */
function ask(to: string, port: number, from: string, name: string): Promise<{ rcode: string; addresses: string[] } | undefined> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const done = (value: { rcode: string; addresses: string[] } | undefined): void => {
      clearTimeout(timer);
      socket.close();
      resolve(value);
    };
    const timer = setTimeout(() => done(undefined), 1_000);
    socket.on('message', (msg) => {
      const decoded = dnsPacket.decode(msg) as dnsPacket.DecodedPacket & { rcode?: string };
      done({ rcode: decoded.rcode ?? '?', addresses: (decoded.answers ?? []).flatMap((a) => (a.type === 'A' ? [String(a.data)] : [])) });
    });
    const query = dnsPacket.encode({ id: 9, type: 'query', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name, class: 'IN' }] });
    socket.bind(0, from, () => socket.send(query, port, to));
  });
}

t.test('a sandbox\'s share on a shared proxy is a sixteenth: four sandboxes at their shares leave the others room', async (t) => {
  const s = await setup(t, { maxConnections: 64, maxConnectionsPerClient: 64 });
  const nets = [1, 2, 3, 4, 5].map((n) => ({ subnet: `127.0.${n}.0/28`, proxy: `127.0.${n}.1`, client: `127.0.${n}.5` }));
  for (const [i, net] of nets.entries()) s.register(`slot-${i}`, `cap-${i}`, `life-${i}-0001`, net.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= nets.length, 'every registration');
  const share = 8; // clientShare(64, 64, SANDBOX_SHARE): a sixteenth of 64, no fewer than 8
  const held: RawResponse[] = [];
  for (const net of nets.slice(0, 4)) {
    for (let i = 0; i < share; i++) held.push(await connect(s, net, 'a.test'));
    const over = await connect(s, net, 'a.test');
    t.same([over.status, over.reason], [429, 'client_limit'], `${net.subnet}: at its share of ${share}`);
  }
  t.ok(held.every((r) => r.status === 200), 'each of four sandboxes holds its share');
  const fifth = await connect(s, nets[4]!, 'a.test');
  t.equal(fifth.status, 200, 'a fifth sandbox is still served (with a quarter each, four held everything)');
  for (const r of [...held, fifth]) r.socket.destroy();
});

t.test('refusal lines at the limits are capped per sandbox, whatever addresses it uses', async (t) => {
  const s = await setup(t, { maxConnections: 64, maxConnectionsPerClient: 1 }, { perSecond: 10_000, burst: 10_000 });
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const heldA = await connect(s, A, 'a.test');
  const heldB = await connect(s, B, 'a.test');
  t.same([heldA.status, heldB.status], [200, 200], 'each sandbox uses up its share of one connection');
  // Nine addresses of sandbox A, 50 refusals each: more than the proxy's whole line burst (400),
  // and each address on its own would stay under one client's burst (100).
  const { clientBurst, clientPerSecond, totalBurst } = REFUSAL_LINES;
  const started = performance.now();
  const addresses = Array.from({ length: 9 }, (_, i) => `127.0.1.${6 + i}`);
  const perAddress = Math.ceil((totalBurst + 50) / addresses.length);
  t.ok(perAddress < clientBurst);
  await Promise.all(
    addresses.map(async (client) => {
      for (let i = 0; i < perAddress; i++) (await connect(s, A, 'a.test', client)).socket.destroy();
    }),
  );
  const seconds = (performance.now() - started) / 1_000;
  const linesA = s.logs.filter((l) => l.reason === 'client_limit' && String(l.client).startsWith('127.0.1.'));
  t.ok(linesA.length > 0 && linesA.every((l) => l.sandbox === 'cap-a'), 'each line names the sandbox');
  t.ok(linesA.length <= clientBurst + Math.ceil(clientPerSecond * seconds) + 1, `sandbox A wrote ${linesA.length} refusal lines in ${seconds.toFixed(1)} s: at most one client's burst and rate`);
  const refused = await connect(s, B, 'a.test', '127.0.2.6');
  t.same([refused.status, refused.reason], [429, 'client_limit']);
  t.ok(s.logs.some((l) => l.reason === 'client_limit' && l.sandbox === 'cap-b'), 'another sandbox\'s refusal still gets its line');
  for (const r of [heldA, heldB]) r.socket.destroy();
});

t.test('allowed lines are capped per sandbox: a flood is counted by host; another sandbox keeps its lines', async (t) => {
  const s = await setup(t, { maxConnectionsPerClient: 64 }, { perSecond: 10_000, burst: 10_000 });
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test', 'c.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const { clientBurst, clientPerSecond } = ALLOWED_LINES;
  const linesOfA = (): number => s.logs.filter((l) => l.event === 'decision' && l.decision === 'allow' && l.sandbox === 'cap-a').length;
  const started = performance.now();
  // Past its burst, and on until 50 had no line (a slow machine gives back tokens meanwhile).
  let flood = 0;
  while (flood < clientBurst + 50 || (flood - linesOfA() < 50 && flood < 20 * clientBurst)) {
    const r = await connect(s, A, 'a.test');
    r.socket.destroy();
    if (r.status !== 200) t.fail(`tunnel ${flood}: ${r.status} ${r.reason}`);
    flood += 1;
  }
  const last = await connect(s, A, 'c.test');
  t.equal(last.status, 200, 'a sandbox over its line rate is still served');
  last.socket.destroy();
  const seconds = (performance.now() - started) / 1_000;
  const most = clientBurst + Math.ceil(clientPerSecond * seconds) + 1;
  const allowedA = s.logs.filter((l) => l.event === 'decision' && l.decision === 'allow' && l.sandbox === 'cap-a');
  t.ok(allowedA.length >= clientBurst && allowedA.length <= most, `sandbox A wrote ${allowedA.length} allowed lines for ${flood + 1} tunnels in ${seconds.toFixed(1)} s: its burst and rate (at most ${most})`);
  const b = await connect(s, B, 'a.test');
  t.equal(b.status, 200);
  b.socket.destroy();
  await settle(() => s.logs.filter((l) => l.event === 'tunnel_closed').length >= allowedA.length + 1, 'the tunnels\' closing lines');
  t.ok(s.logs.some((l) => l.event === 'decision' && l.decision === 'allow' && l.sandbox === 'cap-b'), 'another sandbox still gets its allowed line');
  const closedA = s.logs.filter((l) => l.event === 'tunnel_closed' && l.sandbox === 'cap-a');
  t.equal(closedA.length, allowedA.length, 'a tunnel whose allowed line was held back closes without a line too');
  // The summary goes out every interval, and at close.
  await s.proxy.close();
  const summary = s.logs.find((l) => l.event === 'allowed_lines_suppressed');
  const suppressed = flood + 1 - allowedA.length;
  // The last one may have had a line of its own, if the rate had given back a token by then.
  const cLine = allowedA.some((l) => l.host === 'c.test');
  const held = { a: suppressed - (cLine ? 0 : 1), c: cLine ? 0 : 1 };
  t.same(summary && { lines: summary.lines, byHost: summary.byHost, topClients: summary.topClients }, {
    lines: suppressed,
    byHost: Object.fromEntries(Object.entries({ 'a.test': held.a, 'c.test': held.c }).filter(([, n]) => n > 0)),
    topClients: [`cap-a=${suppressed}`],
  }, 'the lines held back, counted by host and by sandbox');
});

t.test('transparent mode: each network\'s DNS on its proxy address, answered by its sandbox\'s list; TLS by the sandbox too', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['b.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const [dnsPort, tlsPort] = [await freePort(), await freePort()];
  await s.proxy.listenTransparent({
    listen: '0.0.0.0',
    answer: '0.0.0.0',
    ports: [{ kind: 'dns', dialled: 53, listen: dnsPort }, { kind: 'tls', dialled: s.echo, listen: tlsPort }],
    dnsHost: s.tenants,
  });
  let first: Awaited<ReturnType<typeof ask>>;
  const deadline = Date.now() + 3_000;
  do first = await ask(A.proxy, dnsPort, A.client, 'a.test');
  while (first === undefined && Date.now() < deadline);
  t.same(first, { rcode: 'NOERROR', addresses: [A.proxy] }, 'a\'s name, answered with a\'s proxy address');
  t.same(await ask(B.proxy, dnsPort, B.client, 'b.test'), { rcode: 'NOERROR', addresses: [B.proxy] }, 'b\'s, with b\'s');
  t.equal((await ask(B.proxy, dnsPort, B.client, 'a.test'))?.rcode, 'NXDOMAIN', 'a\'s name is not b\'s');
  t.same(s.logs.filter((l) => l.method === 'DNS' && l.host === 'a.test').map((l) => [l.reason, l.sandbox]), [['dns_not_allowed', 'cap-b']], 'the refused name\'s line names b, the sandbox refused');
  t.equal((await ask(A.proxy, dnsPort, B.client, 'a.test'))?.rcode, 'REFUSED', 'a client of b asking a\'s responder');
  const stranger = s.logs.filter((l) => l.reason === 'unknown_client' && l.method === 'DNS');
  t.equal(stranger.length, 1, 'logged');
  t.equal(stranger[0]?.sandbox, undefined, 'as no sandbox: not as a, whose responder it asked');

  // A TLS client of b naming a's host gets b's refusal, as a TLS alert; an unknown client too.
  const hello = (from: string, to: string): Promise<string> =>
    new Promise((resolve) => {
      const socket = net.connect({ host: to, port: tlsPort, localAddress: from });
      const c = tls.connect({ socket, servername: 'a.test', rejectUnauthorized: false });
      c.on('secureConnect', () => resolve('connected'));
      c.on('error', (err) => resolve((err as NodeJS.ErrnoException).code ?? err.message));
      c.setTimeout(3_000, () => resolve('timeout'));
    });
  t.match(await hello(B.client, B.proxy), /ALERT|ECONNRESET|socket hang up/i, 'b naming a\'s host: refused');
  t.ok(s.logs.some((l) => l.sandbox === 'cap-b' && l.reason === 'host_not_allowed' && l.host === 'a.test'), 'as cap-b');
  t.match(await hello('127.0.3.5', '127.0.3.1'), /ALERT|ECONNRESET|socket hang up/i, 'an unknown client: refused');

  // A registration gone: its responder stops answering.
  s.write('slot-b', '{"version": 1, "vacant": true}');
  const gone = Date.now();
  let answer = await ask(B.proxy, dnsPort, B.client, 'b.test');
  while (answer !== undefined && Date.now() - gone < 3_000) answer = await ask(B.proxy, dnsPort, B.client, 'b.test');
  t.equal(answer, undefined, 'a vacant network\'s address answers nothing');
  t.same(await ask(A.proxy, dnsPort, A.client, 'a.test'), { rcode: 'NOERROR', addresses: [A.proxy] }, 'a still answered');
});

t.test('a sandbox opening connections faster than its rate: a few told 429, the rest closed unread; others served', async (t) => {
  const s = await setup(t, {}, { perSecond: 2, burst: 5 });
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  s.register('slot-b', 'cap-b', 'life-b-0001', B.subnet, ['a.test']);
  await settle(() => s.logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const outcomes: string[] = [];
  const began = Date.now();
  for (let k = 0; k < 40; k++) {
    const r = await connect(s, A, 'a.test', `127.0.1.${2 + (k % 11)}`).catch(() => undefined);
    outcomes.push(r === undefined || r.status === 0 ? 'closed' : r.status === 200 ? 'allowed' : r.reason ?? String(r.status));
    r?.socket.destroy();
  }
  const seconds = (Date.now() - began) / 1000;
  const count = (what: string): number => outcomes.filter((o) => o === what).length;
  // Buckets: 5 then 2 a second allowed; of the rest, 20 then 10 a second told.
  t.ok(count('allowed') >= 5 && count('allowed') <= 5 + Math.ceil(2 * seconds), `its burst and rate allowed (${count('allowed')} in ${seconds} s)`);
  t.ok(count('client_limit') >= Math.min(20, 40 - count('allowed')) && count('client_limit') <= 20 + Math.ceil(10 * seconds), `a few told why (${count('client_limit')})`);
  if (seconds < 1) t.ok(count('closed') > 0, `the rest closed unread (${count('closed')})`);
  t.match(String(s.logs.find((l) => l.reason === 'client_limit')?.detail), /new connections a second from sandbox cap-a/);
  const other = await connect(s, B, 'a.test');
  t.equal(other.status, 200, 'another sandbox is served meanwhile');
  other.socket.destroy();
});

t.test('a client of no registered network opening connections faster than the rate: told unknown_client within it, the rest closed unread', async (t) => {
  // A sandbox whose slot is vacant or refused (a lost registration, fail closed) is such a client
  // until a recovery writes its registration again.
  const s = await setup(t, {}, { perSecond: 2, burst: 5 });
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const C = { proxy: '127.0.3.1', client: '127.0.3.5' };
  const outcomes: string[] = [];
  const began = Date.now();
  for (let k = 0; k < 40; k++) {
    const r = await connect(s, C, 'a.test').catch(() => undefined);
    outcomes.push(r === undefined || r.status === 0 ? 'closed' : r.reason ?? String(r.status));
    r?.socket.destroy();
  }
  const seconds = (Date.now() - began) / 1000;
  const told = outcomes.filter((o) => o === 'unknown_client').length;
  t.same(outcomes.filter((o) => o !== 'unknown_client' && o !== 'closed'), [], 'never served');
  // Before, every one was read and answered: an unregistered network's churn spent the event
  // loop every sandbox shares, which the rate keeps a registered sandbox from doing.
  t.ok(told >= 5 && told <= 5 + Math.ceil(2 * seconds), `its burst and rate told why (${told} in ${seconds} s)`);
  const other = await connect(s, A, 'a.test');
  t.equal(other.status, 200, 'a registered sandbox is served meanwhile');
  other.socket.destroy();
});

t.test('a registration rewritten as Docker writes it (removed, then created) never ends for a moment', async (t) => {
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const open = await connect(s, A, 'a.test');
  t.equal(open.status, 200);
  const text = JSON.stringify({ version: 1, sandbox: 'cap-a', lifecycle: 'life-a-0001', subnet: A.subnet, address: A.proxy, policy: { allowHosts: ['a.test', 'b.test'], connectPorts: [s.echo] } });
  for (let k = 0; k < 40; k++) {
    rmSync(join(s.dir, 'slot-a.json'));
    await new Promise((r) => setImmediate(r));
    writeFileSync(join(s.dir, 'slot-a.json'), text);
    await new Promise((r) => setTimeout(r, 5));
  }
  await new Promise((r) => setTimeout(r, 600));
  t.ok(await carries(open), 'the open tunnel, still allowed, was never closed');
  t.notOk(s.logs.some((l) => l.event === 'revoked'), 'no revocation');
  open.socket.destroy();
});

t.test('clients of no registered network holding every health-check slot do not starve the container\'s own check on 127.0.0.1', async (t) => {
  // The image's HEALTHCHECK asks 127.0.0.1 from inside the egress container: on a shared proxy
  // that is a client of no registered network, read only in a health-check slot. Before, any
  // eight addresses of no registered network (the shared network's, the host's) that connected
  // and sent nothing held every slot, two seconds at a time, and the check was refused.
  const s = await setup(t);
  s.register('slot-a', 'cap-a', 'life-a-0001', A.subnet, ['a.test']);
  await settle(() => s.logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const silent = (client: string): Promise<net.Socket> =>
    new Promise((resolve) => {
      const socket = net.connect({ port: s.port, host: '127.0.3.1', localAddress: client }, () => resolve(socket));
      socket.on('error', () => undefined);
    });
  const strangers = await Promise.all([2, 3, 4, 5, 6, 7, 8, 9].map((k) => silent(`127.0.3.${k}`)));
  t.teardown(() => strangers.forEach((socket) => socket.destroy()));
  // A ninth, accepted after them, finds every slot taken: refused at once, not read.
  const began = Date.now();
  const ninth = await rawRequest(s.port, '', '127.0.3.1', 5_000, '127.0.3.10');
  t.same([ninth.status, ninth.reason], [403, 'unknown_client'], 'a ninth client of no registered network is refused');
  t.ok(Date.now() - began < 1_500, 'at once: the eight hold every slot');
  const health = await rawRequest(s.port, 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.1');
  t.equal(health.status, 200, 'the check from 127.0.0.1 is answered meanwhile');
  t.notMatch(health.head, /X-Egress-Sandbox/i, 'naming no sandbox');
});
