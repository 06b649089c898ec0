/**
 * The one catalog of reasons the egress proxy gives for a refusal. Everything a client or an
 * operator sees about a refusal derives from the code: the HTTP status, the `X-Egress-Reason`
 * header, the `reason` log field and the sentence that says what would allow the request.
 * Codes are a public contract (agents branch on them): add codes, never rename one.
 */
export const REASONS = {
  host_not_allowed: {
    status: 403,
    advice: 'add the host name (or a *.parent wildcard) to allowHosts',
  },
  ip_literal: {
    status: 403,
    advice: 'address the host by a name on the allowlist; IP literals are never allowed',
  },
  malformed_host: {
    status: 400,
    advice: 'send an ASCII host name (punycode for international names) without userinfo, wildcards or escapes',
  },
  port_not_allowed: {
    status: 403,
    advice: 'add the port to connectPorts (or ALLOW_CONNECT_PORTS)',
  },
  address_not_allowed: {
    status: 403,
    advice: 'the name resolves to a non-public address; only public unicast destinations are reachable',
  },
  dns_failed: {
    status: 502,
    advice: 'the name did not resolve; check the spelling or the DNS servers of the proxy',
  },
  dns_timeout: {
    status: 504,
    advice: 'the DNS servers of the proxy did not answer in time; retry later',
  },
  connect_failed: {
    status: 502,
    advice: 'no checked address of the host accepted a connection; retry later',
  },
  bad_upstream_response: {
    status: 502,
    advice: 'the upstream answered with something that is not valid HTTP/1.1; nothing of it was passed on; report it to the upstream',
  },
  upstream_failed: {
    status: 502,
    advice: 'the upstream closed or reset the connection before a complete response head; retry later',
  },
  upstream_timeout: {
    status: 504,
    advice: 'the upstream did not answer in time; retry later',
  },
  bad_request: {
    status: 400,
    advice: 'send CONNECT host:port or an absolute http:// URL through the proxy',
  },
  method_not_allowed: {
    status: 403,
    advice: 'use a method the host\'s allowHosts entry lists in methods, or add the method there',
  },
  path_not_allowed: {
    status: 403,
    advice: 'request a path the host\'s allowHosts entry lists in paths, spelled plainly (no encoded "/" or "\\", no "." or ".." or empty segments, no control bytes, no double encoding), or add the path there',
  },
  tunnel_not_allowed: {
    status: 403,
    advice: 'the host\'s allowHosts entry has method or path rules, which the proxy checks in plain HTTP only: send an absolute http:// URL, or list the host in an entry without rules to allow tunnels',
  },
  sni_mismatch: {
    status: 403,
    advice: 'the TLS server name must equal the CONNECT host',
  },
  sni_missing: {
    status: 403,
    advice: 'start the tunnel with a TLS ClientHello whose server name (SNI) is the CONNECT host; for a protocol other than TLS, mark the host tunnel: opaque in the policy',
  },
  tls_hello_malformed: {
    status: 403,
    advice: 'start the tunnel with one well-formed TLS ClientHello (nothing before it); for a protocol other than TLS, mark the host tunnel: opaque in the policy',
  },
  tls_hello_timeout: {
    status: 408,
    advice: 'send the TLS ClientHello promptly after the tunnel opens',
  },
  tls_upstream_not_tls: {
    status: 502,
    advice: 'the upstream did not answer the TLS ClientHello with TLS (it spoke first, or in clear); reach a TLS port of the host, or, for a protocol other than TLS, mark the host tunnel: opaque in the policy',
  },
  upstream_tls_invalid: {
    status: 502,
    advice: 'the upstream of an inspected host did not present a certificate valid for its name under the proxy\'s trust store (--upstream-ca); fix the upstream, or give the proxy the CA that signs it',
  },
  host_mismatch: {
    status: 421,
    advice: 'inside an inspected connection every request\'s Host must name the TLS server name; open a connection to the other host instead',
  },
  client_rejected_ca: {
    // Never an HTTP answer: the client's TLS stack refused the leaf, and this is the reason the
    // connection's decision line gives.
    status: 502,
    advice: 'the client does not trust the deployment CA of inspected hosts: add the certificate "capybara-egress ca" prints to its trust store (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO)',
  },
  secret_wrong_host: {
    status: 403,
    advice: 'a secret placeholder goes only in request headers to the hosts its secret is bound to, never to another host and never in the URL or the body',
  },
  overloaded: {
    status: 503,
    advice: 'the proxy holds as many unchecked bytes as its memory allows (this client its share of them); retry later, with fewer connections opened at once',
  },
  dns_not_allowed: {
    // Never an HTTP answer: a DNS query for a name off the allowlist gets NXDOMAIN (transparent
    // mode), and this is the reason its decision line gives.
    status: 403,
    advice: 'the name is not on the allowlist, so it does not resolve; add the host name (or a *.parent wildcard) to allowHosts',
  },
  too_many_connections: {
    status: 503,
    advice: 'the proxy is at its connection limit; retry later',
  },
  unknown_client: {
    status: 403,
    advice: 'this proxy serves only the sandbox networks registered with it, and none holds this connection; a sandbox being created or destroyed is not served, so retry once it runs, or recreate it',
  },
  policy_revoked: {
    // An open connection that its sandbox's new allowlist no longer allows (its host, or a tunnel
    // to it as it runs) is closed, with this reason in its line and no answer; a request decided
    // while the allowlist changed is answered with it.
    status: 403,
    advice: 'the sandbox\'s allowlist changed while the connection was open and no longer allows its host; the operator allows it again with capybara-sandbox allow',
  },
  client_limit: {
    status: 429,
    advice: 'this client has too many open connections; close some and retry',
  },
  header_timeout: {
    status: 408,
    advice: 'send the complete request head promptly',
  },
  headers_too_large: {
    status: 431,
    advice: 'send a smaller request head',
  },
  internal_error: {
    status: 500,
    advice: 'the proxy failed while deciding; the request was refused (fail closed); see the proxy log',
  },
} as const satisfies Record<string, { status: number; advice: string }>;

export type Reason = keyof typeof REASONS;

export function isReason(value: string): value is Reason {
  return Object.hasOwn(REASONS, value);
}
