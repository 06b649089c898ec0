/**
 * Plain HTTP by absolute URL (or, on a transparent listener, by its Host): decide on the
 * authority, check the matched entry's method and path rules, judge the request head, then
 * forward it (exchange.ts). Under path rules the path forwarded is the normal form that was
 * compared (policy/request-path.ts), so the server reads the path the rule allowed.
 *
 * The proxy owns the framing on both sides. Upstream, it sends the checked authority as Host and
 * frames the body itself (Content-Length or chunked, for any method), so a body can never be read
 * as a second request. Downstream, the upstream's status line and fields are validated before
 * anything is written; once a response has started, a failure ends that client connection and
 * never writes a second response. Each request gets exactly one decision line and one decision
 * metric, whatever its outcome.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { EGRESS_HEALTH_PATH } from '../../common/index.js';
import { applySecrets, checkRequest, checkTarget, repinTarget, resolveTarget, screenTarget, secretLabel, type AllowedTarget, type Decision, type Policy, type SecretSet } from '../../policy/index.js';
import { sandboxHealthField, type ClientConnection, type ProxyContext } from '../admission/index.js';
import { destinationOf, F, ms, refuseResponse, revokedWhileDeciding, type DecisionRecorder, type LineFields, type Refusal } from '../record/index.js';
import { ValueWatch } from '../secrets/index.js';
import { HTTP_PORT, HTTPS_PORT, parseAbsoluteUrl } from './authority.js';
import { Exchange } from './exchange.js';
import { inspectedTarget } from './inspected-target.js';
import { checkRequestHead } from './request-head.js';
import { transparentTarget } from './transparent-http.js';

/**
 * Methods whose answer is the request itself (RFC 9110 §9.3.8; TRACK is IIS's): a server that
 * honours them (Apache httpd does by default) would hand the sandbox every header the proxy put a
 * secret in. Never forwarded with a secret.
 */
const ECHOING_METHODS = new Set(['TRACE', 'TRACK']);

/**
 * What the secrets put into a request (`injected`, by label) ask of it: a refusal when its method
 * would have them echoed back, else a watch on the response for their values (none if none went in).
 */
function secretsSent(set: SecretSet | undefined, method: string, host: string, injected: readonly string[], headers: readonly string[]): { readonly refused: string; readonly reason: 'method_not_allowed' | 'bad_request' } | { readonly watch: ValueWatch | undefined } {
  if (injected.length === 0 || set === undefined) return { watch: undefined };
  if (ECHOING_METHODS.has(method)) {
    return { refused: `${method} asks ${host} to answer with the request itself, which would carry the secrets the proxy puts in; it is not forwarded to a host secrets are bound to`, reason: 'method_not_allowed' };
  }
  const watch = new ValueWatch([...set.byName.values()].filter((s) => injected.includes(secretLabel(s))), headers);
  if (watch.encoded > ValueWatch.MAX_ENCODED_CREDENTIALS) {
    return { refused: `the Basic credentials a secret goes into would be watched for in the response in more than ${ValueWatch.MAX_ENCODED_CREDENTIALS} encodings (a short value, in credentials that differ): send it in fewer fields`, reason: 'bad_request' };
  }
  return { watch };
}

/**
 * Fields a request a secret went into never carries to its host, as the value watch needs the
 * response whole and plain. `Accept-Encoding`: a workload that asked a reflecting host for gzip
 * would get the value back compressed, past the watch; `identity` alone is asked for instead.
 * `Range` (and `If-Range`, its condition): byte ranges of a reflected answer, each asked for in a
 * request of its own, would bring the value back in pieces, and the watch reads one response.
 * `Request-Range`: Range's spelling in the Netscape-era draft, which Apache httpd still honours
 * when a request has no Range. `If-None-Match` and `If-Match`: a 304 or a 412 says whether a
 * guessed ETag, a hash of the body as Express makes it, is the body's: with a host that quotes a
 * field cut short, that answers a guess at each next character of a value, one request each (the
 * response's own digests are dropped for the same reason, value-watch.ts). `Accept-Charset`, and
 * an `Accept` that names a charset: a host that writes in the charset asked for (Spring's String
 * converter, any charset Java has) would write the value in EBCDIC, past the watch, which reads
 * ASCII and UTF-16/32 only. All of such an `Accept` goes, not its parameter alone: a parser that
 * reads its quoting otherwise than the proxy's would still find a charset in what was left.
 */
const UNWATCHABLE = new Set(['accept-encoding', 'range', 'if-range', 'request-range', 'if-none-match', 'if-match', 'accept-charset']);

/** The fields of a request a secret went into, without UNWATCHABLE ones (in any case), asking for identity. */
function watchable(headers: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!.toLowerCase();
    if (UNWATCHABLE.has(name) || (name === 'accept' && /charset/i.test(headers[i + 1]!))) continue;
    out.push(headers[i]!, headers[i + 1]!);
  }
  out.push('accept-encoding', 'identity');
  return out;
}

/**
 * The addresses an allowed request goes to: its own lookup's, checked; inside an inspected
 * connection (whose host is every request's), those checked for the connection, checked again
 * (resolved once for the connection, as for a tunnel).
 */
function pin(ctx: ProxyContext, connection: ClientConnection, policy: Policy, checked: AllowedTarget): Decision | Promise<Decision> {
  const { entry, clientKey } = connection;
  if (entry?.kind === 'inspect') return repinTarget(policy, checked, entry.addresses, ctx.ownListener);
  return resolveTarget(policy, checked, (name) => ctx.lookup(name, clientKey), ctx.ownListener);
}

export function createForwarder(ctx: ProxyContext) {
  /** One plain-HTTP request on `connection`; its one decision line goes through `record`. */
  return async function handleRequest(connection: ClientConnection, req: IncomingMessage, res: ServerResponse, record: DecisionRecorder): Promise<void> {
    const started = performance.now();
    const { log, entry } = connection;
    const deny = (refusal: Refusal, fields: LineFields = {}): void => {
      record.deny(refusal, fields);
      refuseResponse(res, refusal);
    };

    const url = req.url ?? '';
    // On a transparent listener every request is for the server named by its Host header, /healthz too.
    if (entry === undefined && url === EGRESS_HEALTH_PATH && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': '3', ...sandboxHealthField(connection.identity) }).end(req.method === 'GET' ? 'ok\n' : undefined);
      return;
    }

    // Until forwarding starts, a parse error later on this connection refuses this request (the
    // failing bytes follow it), unless it was refused already: that refusal closes the
    // connection, and nothing answers it twice.
    let target: { host: string; port: number } | undefined;
    const early = (refusal: Refusal): void => {
      if (record.recorded) return;
      deny(refusal, target === undefined ? {} : { [F.host]: target.host, [F.port]: target.port });
    };
    connection.holdInFlight(res, early);

    const policy = connection.policy();
    // Before anything quotes the URL or the host (a detail, the line's host): a placeholder there
    // is refused whatever the host, and never written down.
    const leaked = screenTarget(policy.secrets, url, req.rawHeaders);
    if (leaked !== undefined) return deny(leaked, { [F.secrets]: leaked.secrets });
    if (entry === undefined && url.startsWith('/')) return deny({ reason: 'bad_request', detail: 'this is a proxy: send an absolute http:// URL or CONNECT host:port' });
    const parsed =
      entry === undefined ? parseAbsoluteUrl(url) : entry.kind === 'inspect' ? inspectedTarget(req.rawHeaders, url, entry) : transparentTarget(req.rawHeaders, url, entry.port);
    if (!parsed.ok) return deny({ reason: parsed.reason, detail: parsed.detail });
    // Inside an inspected connection, the upstream is TLS the proxy opens and verifies.
    const trust = entry?.kind === 'inspect' ? ctx.inspection()?.upstreamCa : undefined;
    if (entry?.kind === 'inspect' && trust === undefined) return deny({ reason: 'internal_error', detail: 'the proxy no longer has the trust store of inspected hosts' });

    const checked = checkTarget(policy, parsed.host, parsed.port);
    if (!checked.allowed) return deny(checked);
    target = checked;
    // Plain HTTP never gets a secret (it would travel in clear): every placeholder in its head is
    // refused, to a bound host too; inside an inspected connection a bound host gets its secrets.
    // Before the rules, whose refusals quote the path and headers.
    const secrets = applySecrets(policy.secrets, checked, { target: parsed.path, headers: req.rawHeaders, inspected: trust !== undefined });
    if (!secrets.ok) return deny({ reason: secrets.reason, detail: secrets.detail, host: checked.host, port: checked.port }, { [F.rule]: checked.rule, [F.secrets]: secrets.secrets });
    const sent = secretsSent(policy.secrets, req.method ?? '', checked.host, secrets.injected, secrets.headers);
    if ('refused' in sent) return deny({ reason: sent.reason, detail: sent.refused, host: checked.host, port: checked.port }, { [F.rule]: checked.rule, [F.secrets]: secrets.injected });
    if (secrets.injected.length > 0) record.note({ [F.secrets]: secrets.injected });
    // The entry's method and path rules, before any lookup: a refused request reaches nothing.
    // They read the screened fields: a refusal quotes an override header, never a secret.
    const ruled = checkRequest(checked, { method: req.method ?? '', target: parsed.path, rawHeaders: secrets.screened });
    if (!ruled.allowed) return deny(ruled, { [F.rule]: checked.rule });
    const head = checkRequestHead(secrets.headers, checked.host, checked.port, req.httpVersion !== '1.0', trust === undefined ? HTTP_PORT : HTTPS_PORT);
    if (!head.ok) return deny({ reason: 'bad_request', detail: head.detail, host: checked.host, port: checked.port });

    const decision = await pin(ctx, connection, policy, checked);
    // Refused meanwhile, by a parse error behind it.
    if (record.recorded) return;
    const decideMs = ms(started);
    if (!decision.allowed) {
      if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
      return deny(decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs });
    }
    // The policy changed while the name resolved: a shared proxy's revocation did not see it yet.
    if (connection.policy() !== policy) return deny(revokedWhileDeciding(decision));
    connection.target = { kind: 'http', host: decision.host, port: decision.port, request: { method: req.method ?? '', target: parsed.path, rawHeaders: secrets.screened } };
    // Marked once the whole decision allowed it: a refusal in every mode (an address) is no would_deny.
    record.wouldDeny(decision.wouldDeny);
    if (req.socket.destroyed) {
      // Gone while its request was decided: still one decision line.
      record.allow(destinationOf(decision), { [F.decideMs]: decideMs, [F.error]: 'client_closed' });
      return;
    }
    const headers = sent.watch === undefined ? head.headers : watchable(head.headers);
    new Exchange(ctx, connection, req, res, { decision, path: ruled.target, headers, framing: head.framing, started, decideMs, record, trust, secrets: policy.secrets, watch: sent.watch }).start();
  };
}
