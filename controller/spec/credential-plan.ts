/**
 * What a sandbox with inspected hosts or secrets gets, as pure data: the per-sandbox policy of its
 * egress proxy (EGRESS_POLICY_JSON), the proxy's environment (the CA, the real values, the
 * placeholders) and the sandbox's (the placeholders, the CA certificate, the variables that make
 * its clients trust it). The I/O that feeds it (the CA file, the values, the random source) is
 * sandbox/credential-source.ts. The CA key and the real values are only ever in the proxy's half.
 */
import { EGRESS_ENV } from '../../common/index.js';
import type { DeploymentConfig } from './config.js';
import type { SecretConfig } from './credentials-config.js';
import { SandboxError } from './errors.js';

/** Where the sandbox finds the CA: a root-owned tmpfs its root idle process fills at every start. */
export const CA_DIR = '/etc/capybara';
export const CA_BUNDLE_FILE = `${CA_DIR}/ca-bundle.pem`;
export const CA_FILE = `${CA_DIR}/ca.pem`;
/** The sandbox variable carrying the CA certificate (base64 PEM) to its idle process; public data. */
export const CA_CERT_ENV = 'CAPYBARA_CA_CERT';
/** The proxy's variable holding a secret's value: prefixed, so no name can set one the proxy reads (NODE_OPTIONS). */
const SECRET_VALUE_PREFIX = 'CAPYBARA_SECRET_';
const PLACEHOLDER_PREFIX = 'EGRESS_PLACEHOLDER_';

/** The variables that make the sandbox's clients trust the CA: curl, OpenSSL, Python, requests, git, pip, Node. */
const TRUST_ENV: Readonly<Record<string, string>> = Object.freeze({
  SSL_CERT_FILE: CA_BUNDLE_FILE,
  REQUESTS_CA_BUNDLE: CA_BUNDLE_FILE,
  CURL_CA_BUNDLE: CA_BUNDLE_FILE,
  GIT_SSL_CAINFO: CA_BUNDLE_FILE,
  PIP_CERT: CA_BUNDLE_FILE,
  // Node adds these to its own roots (a bundle would add the system's twice).
  NODE_EXTRA_CA_CERTS: CA_FILE,
});

/** A secret that applies to one sandbox: its value and that sandbox's placeholder. */
export interface SecretMaterial {
  readonly config: SecretConfig;
  readonly value: string;
  readonly placeholder: string;
}

export interface CredentialInput {
  readonly allowHosts: readonly string[];
  /** The deployment CA: its certificate (PEM) and its EGRESS_CA_INLINE form (with the key). */
  readonly caCertificatePem: string;
  readonly caInline: string;
  readonly secrets: readonly SecretMaterial[];
}

export interface SandboxCredentials {
  /** The proxy's environment: EGRESS_POLICY_JSON, EGRESS_CA_INLINE, the values, the placeholders. */
  readonly egressEnv: Readonly<Record<string, string>>;
  /** The sandbox's environment: the placeholders, the CA certificate and the trust variables. */
  readonly sandboxEnv: Readonly<Record<string, string>>;
  /** Entries inspected, and the names of the secrets that apply (for logs and tests; no value). */
  readonly inspected: readonly string[];
  readonly secretNames: readonly string[];
}

/** The secrets of the deployment that apply to an allowlist: one of their hosts is an entry. */
export function applicableSecrets(config: Pick<DeploymentConfig, 'secrets'>, allowHosts: readonly string[]): SecretConfig[] {
  const entries = new Set(allowHosts);
  return (config.secrets ?? []).filter((s) => s.hosts.some((h) => entries.has(h)));
}

/**
 * Whether two allowlist entries (a name, or `*.` and the parent of the names it allows) allow a
 * name in common: `*.npmjs.org` and `registry.npmjs.org`, `*.a.npmjs.org` and `*.npmjs.org`.
 */
export function entriesOverlap(a: string, b: string): boolean {
  const below = (entry: string): string | undefined => (entry.startsWith('*.') ? entry.slice(2) : undefined);
  const [x, y] = [a.toLowerCase(), b.toLowerCase()];
  const [px, py] = [below(x), below(y)];
  if (px === undefined && py === undefined) return x === y;
  if (px !== undefined && py !== undefined) return px === py || px.endsWith(`.${py}`) || py.endsWith(`.${px}`);
  return px === undefined ? x.endsWith(`.${py!}`) : y.endsWith(`.${px}`);
}

/**
 * The entries the proxy inspects: every one that allows a name an inspectHosts entry covers,
 * however the allowlist spells it (`registry.npmjs.org` or `*.github.com` would otherwise reach
 * a name the deployment inspects through a plain tunnel), and those a secret binds (as written:
 * a secret is only ever put in for its exact names).
 */
export function inspectedEntries(config: Pick<DeploymentConfig, 'inspectHosts' | 'secrets'>, allowHosts: readonly string[]): string[] {
  const bound = new Set(applicableSecrets(config, allowHosts).flatMap((s) => s.hosts));
  const inspect = config.inspectHosts ?? [];
  return allowHosts.filter((h) => bound.has(h) || inspect.some((p) => entriesOverlap(p, h)));
}

/** The one-line policy of the proxy: the allowlist, inspected entries as objects with their secrets. */
export function sandboxPolicyJson(allowHosts: readonly string[], inspected: readonly string[], secrets: readonly SecretConfig[]): string {
  const inspect = new Set(inspected);
  const entries = allowHosts.map((host) => {
    if (!inspect.has(host)) return host;
    const bound = secrets.filter((s) => s.hosts.includes(host)).map((s) => ({
      name: s.name,
      ...(s.header === undefined ? {} : { header: s.header }),
      ...(s.format === undefined ? {} : { format: s.format }),
      env: `${SECRET_VALUE_PREFIX}${s.name}`,
    }));
    return { host, inspect: true, ...(bound.length === 0 ? {} : { secrets: bound }) };
  });
  return JSON.stringify({ version: 1, allowHosts: entries });
}

export function sandboxCredentials(input: CredentialInput, config: Pick<DeploymentConfig, 'inspectHosts' | 'secrets'>): SandboxCredentials {
  const inspected = inspectedEntries(config, input.allowHosts);
  const egressEnv: Record<string, string> = {
    [EGRESS_ENV.policyJson]: sandboxPolicyJson(input.allowHosts, inspected, input.secrets.map((s) => s.config)),
    [EGRESS_ENV.caInline]: input.caInline,
  };
  const pem = input.caCertificatePem.endsWith('\n') ? input.caCertificatePem : `${input.caCertificatePem}\n`;
  const sandboxEnv: Record<string, string> = { ...TRUST_ENV, [CA_CERT_ENV]: Buffer.from(pem).toString('base64') };
  for (const s of input.secrets) {
    egressEnv[`${SECRET_VALUE_PREFIX}${s.config.name}`] = s.value;
    egressEnv[`${PLACEHOLDER_PREFIX}${s.config.name}`] = s.placeholder;
    sandboxEnv[s.config.name] = s.placeholder;
  }
  return Object.freeze({ egressEnv, sandboxEnv, inspected, secretNames: input.secrets.map((s) => s.config.name) });
}

/** The alphabets a placeholder may be drawn from, narrowest first: the first that holds the whole value is its shape. */
const ALPHABETS = [
  '0123456789',
  '0123456789abcdef',
  '0123456789ABCDEF',
  'abcdefghijklmnopqrstuvwxyz0123456789',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~',
];
/** Anything else printable: letters and digits (no quote, blank or separator a client would mangle). */
const FALLBACK = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** Fewer random characters than this would make a placeholder guessable (or equal to the value). */
const MIN_RANDOM = 16;

/**
 * A vendor's prefix (ghp_, sk_, github_, whsec_): one to eight lower-case letters and "_". Anything
 * longer or otherwise before a "_" is part of the secret (a base64url token has "_" anywhere), and
 * the sandbox holds the placeholder: before a review it kept all of a value up to its first "_".
 */
const VENDOR_PREFIX = /^[a-z]{1,8}_/;

/**
 * A placeholder of the value's shape: the same vendor prefix (above), the same length, the rest
 * drawn with `randomIndex` (a uniform integer below n: crypto.randomInt) from the narrowest
 * alphabet that holds the value's rest. Base64 padding at the end is kept as it is. A value too
 * short to leave 16 random characters is refused: its placeholder could be guessed, or be the value.
 */
export function placeholderFor(value: string, randomIndex: (n: number) => number): string {
  const prefix = VENDOR_PREFIX.exec(value)?.[0] ?? '';
  let rest = value.slice(prefix.length);
  const padding = /=*$/.exec(rest)?.[0] ?? '';
  rest = rest.slice(0, rest.length - padding.length);
  const alphabet = ALPHABETS.find((a) => [...rest].every((ch) => a.includes(ch))) ?? FALLBACK;
  if (rest.length < MIN_RANDOM) {
    throw new SandboxError('invalid_config', `leaves ${rest.length} characters after its prefix, fewer than ${MIN_RANDOM}: a placeholder of its shape could be guessed`);
  }
  let out = prefix;
  for (let i = 0; i < rest.length; i++) out += alphabet[randomIndex(alphabet.length)];
  return out + padding;
}
