/**
 * Plain HTTP by absolute URL: decide on the URL's authority, then forward with http-proxy over a
 * pooled connection to the pinned addresses. The Host header must name the same host and port as
 * the URL (otherwise the upstream could route on a name that was never checked); hop-by-hop and
 * Proxy-* headers stop here.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import httpProxy from 'http-proxy';
import { decide } from '../policy/index.js';
import { parseAbsoluteUrl } from './authority.js';
import { connectionOf, type ProxyContext } from './context.js';
import { DialError } from './dial.js';
import { F, ms, type Logger } from './log.js';
import { refuseResponse, type Refusal } from './refusal.js';

const HEALTH_PATH = '/healthz';

// RFC 9110 §7.6.1 hop-by-hop fields, plus the legacy ones proxies still meet. `expect` is
// answered by this proxy itself (Node sends 100 Continue), so it is not passed on either.
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect']);

/** Removes hop-by-hop fields, fields named by Connection, and every Proxy-* field. */
function stripHopByHop(headers: IncomingMessage['headers']): void {
  const named = String(headers.connection ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  for (const name of Object.keys(headers)) {
    if (HOP_BY_HOP.has(name) || name.startsWith('proxy-') || named.includes(name)) delete headers[name];
  }
}

function countHost(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]?.toLowerCase() === 'host') n += 1;
  return n;
}

/** Compares two hosts as a resolver would read them: case and one trailing dot do not matter. */
function sameHost(a: string, b: string): boolean {
  const norm = (h: string): string => (h.endsWith('.') ? h.slice(0, -1) : h).toLowerCase();
  return norm(a) === norm(b);
}


export function createForwarder(ctx: ProxyContext, root: Logger) {
  const proxy = httpProxy.createProxyServer({ xfwd: false, ws: false, changeOrigin: false, toProxy: true, proxyTimeout: ctx.limits.idleTimeoutMs });
  // Errors are handled per request through the web() callback; this keeps stray ones from
  // becoming unhandled 'error' events.
  proxy.on('error', () => undefined);

  function deny(log: Logger, req: IncomingMessage, res: ServerResponse, refusal: Refusal, fields: Record<string, unknown> = {}): void {
    ctx.observer.decision('deny', refusal.reason);
    log.info({ [F.event]: 'decision', [F.decision]: 'deny', [F.method]: req.method, [F.reason]: refusal.reason, [F.detail]: refusal.detail, [F.host]: refusal.host, [F.port]: refusal.port, ...fields });
    refuseResponse(res, refusal);
  }

  return async function handleRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const { log, counted } = connectionOf(req.socket, root);
    const url = req.url ?? '';
    if (url.startsWith('/')) {
      if (url === HEALTH_PATH && (req.method === 'GET' || req.method === 'HEAD')) {
        res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': '3' }).end(req.method === 'GET' ? 'ok\n' : undefined);
        return;
      }
      return deny(log, req, res, { reason: 'bad_request', detail: 'this is a proxy: send an absolute http:// URL or CONNECT host:port' });
    }

    const target = parseAbsoluteUrl(url);
    if (!target.ok) return deny(log, req, res, { reason: target.reason, detail: target.detail });

    const hosts = countHost(req.rawHeaders);
    if (hosts > 1) return deny(log, req, res, { reason: 'bad_request', detail: 'more than one Host header' });
    const hostHeader = req.headers.host;
    if (hostHeader === undefined && req.httpVersion !== '1.0') {
      return deny(log, req, res, { reason: 'bad_request', detail: 'an HTTP/1.1 request needs a Host header' });
    }
    if (hostHeader !== undefined) {
      const fromHeader = parseAbsoluteUrl(`http://${hostHeader}/`);
      const same = fromHeader.ok && sameHost(fromHeader.host, target.host) && fromHeader.port === target.port;
      if (!same) return deny(log, req, res, { reason: 'bad_request', detail: 'the Host header does not name the host and port of the URL' });
    }

    const decision = await decide(ctx.policy(), target.host, target.port, ctx.lookup);
    const decideMs = ms(started);
    if (!decision.allowed) {
      if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
      return deny(log, req, res, decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs });
    }
    if (req.socket.destroyed) return;

    stripHopByHop(req.headers);
    const agent = ctx.agents.forRequest(decision.host, decision.port, decision.addresses, target.path);
    ctx.observer.decision('allow', 'allowed');
    // Socket counters, not per-chunk listeners: what the client sent since the previous request
    // (this request's head and body) and what was written while this one was in flight (HTTP/1.1
    // has one request in flight per connection).
    const socket = req.socket;
    const writtenAtStart = socket.bytesWritten;
    // 'close' rather than 'finish': a request the client abandons is logged too.
    res.once('close', () => {
      const bytesUp = socket.bytesRead - counted.read;
      counted.read = socket.bytesRead;
      const bytesDown = socket.bytesWritten - writtenAtStart;
      ctx.observer.httpBytes(bytesUp, bytesDown);
      log.info({
        [F.event]: 'decision',
        [F.decision]: 'allow',
        [F.method]: req.method,
        [F.host]: decision.host,
        [F.port]: decision.port,
        [F.rule]: decision.rule,
        [F.pinnedBy]: decision.pinnedBy,
        [F.addresses]: decision.addresses,
        [F.status]: res.statusCode,
        completed: res.writableFinished,
        [F.bytesUp]: bytesUp,
        [F.bytesDown]: bytesDown,
        [F.decideMs]: decideMs,
        [F.durationMs]: ms(started),
      });
    });
    proxy.web(req, res, { target: { protocol: 'http:', host: decision.host, port: decision.port }, agent }, (err: Error) => {
      if (err instanceof DialError || res.headersSent === false) {
        const detail = err instanceof DialError ? err.message : `upstream failed: ${(err as NodeJS.ErrnoException).code ?? err.message}`;
        deny(log, req, res, { reason: 'connect_failed', detail, host: decision.host, port: decision.port }, { [F.addresses]: decision.addresses, [F.dialed]: err instanceof DialError ? err.attempts : undefined });
      } else {
        res.destroy();
      }
    });
  };
}
