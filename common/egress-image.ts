/**
 * The interface of the egress proxy image as other programs meet it: the environment variables
 * it reads, the port it listens on, the metric names it serves and how an allowlist is written
 * into one string. The proxy defines its configuration with these names and the controller
 * configures its per-sandbox proxies with them, so neither can drift from the other. Names and
 * numbers only: importing this never loads the proxy.
 */

/** Environment variables of `capybara-egress` (each but the last the twin of a flag). */
export const EGRESS_ENV = {
  policyFile: 'EGRESS_POLICY_FILE',
  allowHosts: 'EGRESS_ALLOW_HOSTS',
  listen: 'EGRESS_LISTEN',
  dnsServers: 'EGRESS_DNS_SERVERS',
  connectPorts: 'ALLOW_CONNECT_PORTS',
  metricsListen: 'EGRESS_METRICS_LISTEN',
  logLevel: 'EGRESS_LOG_LEVEL',
  tunnelDefault: 'EGRESS_TUNNEL_DEFAULT',
  requireSni: 'EGRESS_REQUIRE_SNI',
  maxConnections: 'EGRESS_MAX_CONNECTIONS',
  maxConnectionsPerClient: 'EGRESS_MAX_CONNECTIONS_PER_CLIENT',
  idleTimeoutMs: 'EGRESS_IDLE_TIMEOUT_MS',
  maxTunnelMs: 'EGRESS_MAX_TUNNEL_MS',
  headerTimeoutMs: 'EGRESS_HEADER_TIMEOUT_MS',
  helloTimeoutMs: 'EGRESS_TLS_HELLO_TIMEOUT_MS',
  maxHeaderBytes: 'EGRESS_MAX_HEADER_BYTES',
  dnsTimeoutMs: 'EGRESS_DNS_TIMEOUT_MS',
  connectTimeoutMs: 'EGRESS_CONNECT_TIMEOUT_MS',
  memoryLimitMb: 'EGRESS_MEMORY_LIMIT_MB',
  transparentListen: 'EGRESS_TRANSPARENT_LISTEN',
  transparentAnswer: 'EGRESS_TRANSPARENT_ANSWER',
  transparentPortMap: 'EGRESS_TRANSPARENT_PORT_MAP',
  /** What a refusal of a host off the allowlist advises instead (the controller's sandboxes point at their own tools). */
  refusalHint: 'EGRESS_REFUSAL_HINT',
  /** `report`: learn an allowlist (what only the allowlist or the ports refuse is allowed, marked would_deny). */
  mode: 'EGRESS_MODE',
  /** The deployment CA of inspected hosts: a directory only the proxy's user may read, generated on first use. */
  caDir: 'EGRESS_CA_DIR',
  /** The deployment CA given inline instead (the controller's per-sandbox proxies): base64 of the certificate's and the key's PEM. */
  caInline: 'EGRESS_CA_INLINE',
  /** The PEM bundle the upstreams of inspected hosts are verified against (default: the system trust store). */
  upstreamCa: 'EGRESS_UPSTREAM_CA',
  /** A shared proxy's directory of per-sandbox registrations (one file per sandbox network). */
  tenantsDir: 'EGRESS_TENANTS_DIR',
  /** The policy as one line of JSON, instead of a file (the controller's per-sandbox proxies). */
  policyJson: 'EGRESS_POLICY_JSON',
  /** Tests only: a JSON map of host to address(es) that pins those names. */
  testHosts: 'CAPYBARA_EGRESS_TEST_HOSTS',
} as const;

/** In a shared proxy's refusal hint (`EGRESS_REFUSAL_HINT`): the name of the sandbox refused. */
export const EGRESS_HINT_SANDBOX = '{sandbox}';

/** The proxy port: the CLI's default on loopback, and what the image listens on everywhere. */
export const EGRESS_PROXY_PORT = 3128;

/** The port the controller has its per-sandbox proxies serve metrics on (loopback only). */
export const EGRESS_METRICS_PORT = 9464;

/** The proxy's own health endpoint on the proxy port. */
export const EGRESS_HEALTH_PATH = '/healthz';

/**
 * On a shared proxy, the health answer to a client of a registered sandbox network names that
 * sandbox and the registration it was served under (`sandboxHealthValue`): the controller's probe
 * from inside a sandbox learns that its own registration is in force, not an earlier one of the
 * same name and subnet, and not only that the process answers (an unregistered client's health
 * check is answered too, with no such field).
 */
export const EGRESS_SANDBOX_HEADER = 'X-Egress-Sandbox';

/** The value of EGRESS_SANDBOX_HEADER: `<sandbox>; lifecycle=<lifecycle id>`. */
export function sandboxHealthValue(sandbox: string, lifecycle: string): string {
  return `${sandbox}; lifecycle=${lifecycle}`;
}

/** Where the metrics listener serves Prometheus text. */
export const EGRESS_METRICS_PATH = '/metrics';

/** Prometheus metric names served at /metrics. */
export const EGRESS_METRICS = {
  decisions: 'egress_decisions_total',
  /** A shared proxy's decisions by sandbox and outcome (a sandbox's series go with its registration). */
  sandboxDecisions: 'egress_sandbox_decisions_total',
  /** ... its refusals by sandbox and reason, bytes by sandbox and direction, tunnels open by sandbox. */
  sandboxDenials: 'egress_sandbox_denials_total',
  sandboxBytes: 'egress_sandbox_bytes_total',
  sandboxOpenTunnels: 'egress_sandbox_open_tunnels',
  openTunnels: 'egress_open_tunnels',
  bytes: 'egress_bytes_total',
  dnsSeconds: 'egress_dns_seconds',
  connectSeconds: 'egress_connect_seconds',
  heldBytes: 'egress_held_bytes',
  dnsQueries: 'egress_dns_queries_total',
  wouldDeny: 'egress_would_deny_total',
  reportMode: 'egress_report_mode',
  buildInfo: 'capybara_build_info',
  reloadSuccessful: 'egress_policy_last_reload_successful',
  reloadSeconds: 'egress_policy_last_reload_timestamp_seconds',
  policySeconds: 'egress_policy_loaded_timestamp_seconds',
} as const;

/**
 * An allowlist as one string (`EGRESS_ALLOW_HOSTS`, and the label a sandbox records its
 * allowlist in): entries joined by commas. Entries are host names or `*.` patterns, which never
 * contain a comma, so the codec is exact.
 */
export function encodeAllowHosts(hosts: readonly string[]): string {
  return hosts.join(',');
}

export function decodeAllowHosts(text: string): string[] {
  return text.split(',').map((s) => s.trim()).filter((s) => s !== '');
}
