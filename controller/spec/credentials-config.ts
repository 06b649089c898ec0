/**
 * The deployment config's credentials: which allowlist entries the egress proxy inspects (TLS it
 * terminates with the deployment CA), which secrets it injects, and where the controller keeps
 * that CA. Only the operator's config names them: a sandbox@1 create cannot ask for a secret, or
 * for one the deployment does not list (a workload must not choose what it is given). A secret
 * applies to every sandbox whose allowlist names one of its hosts exactly; the sandbox then holds
 * a placeholder of the same shape, never the value, which the controller reads from its own
 * environment (the variable the secret is named after) or a file, at each create.
 */
import { z } from 'zod';
import { allowHostSchema } from './sandbox-spec.js';
import { PRINTABLE_ASCII } from './ascii-body.js';
import { containerEnvNameSchema } from './env-name.js';

/**
 * Names the controller sets in a sandbox (proxy and CA variables, HOME) or keeps for itself
 * (CAPYBARA_*, EGRESS_*): a secret's placeholder must not replace one of them.
 */
const CONTROLLER_NAMES = /^(?:HTTPS?_PROXY|NO_PROXY|HOME|SSL_CERT_FILE|SSL_CERT_DIR|NODE_EXTRA_CA_CERTS|NODE_OPTIONS|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|GIT_SSL_CAINFO|PIP_CERT|CAPYBARA_\w*|EGRESS_\w*)$/i;

/** An HTTP field name (RFC 9110 token), short. */
const HEADER_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/;

const secretSchema = z
  .strictObject({
    name: z
      .string()
      .regex(/^[A-Z_][A-Z0-9_]{0,63}$/, 'must be an upper-case variable name ([A-Z_][A-Z0-9_]*, at most 64 characters)')
      .pipe(containerEnvNameSchema)
      .refine((name) => !CONTROLLER_NAMES.test(name), { message: 'is a variable the controller sets in the sandbox or keeps for itself (proxy and CA variables, HOME, NODE_OPTIONS, CAPYBARA_*, EGRESS_*)' })
      .describe('The variable the sandbox gets, holding a placeholder; also the controller\'s own variable holding the real value (unless file is set).'),
    hosts: z
      .array(allowHostSchema.refine((host) => !host.startsWith('*.'), { message: 'is a wildcard: a secret binds to exact names' }))
      .min(1)
      .describe('Exact host names the real value may be sent to; the secret applies to a sandbox whose allowlist names one of them exactly (those entries are then inspected).'),
    header: z.string().regex(HEADER_RE, 'must be an HTTP header name').optional()
      .describe('The header the egress proxy sets on every request to the hosts (replacing any the sandbox sent); none: the placeholder is only swapped where the sandbox puts it in a header.'),
    format: z
      .string()
      .regex(PRINTABLE_ASCII, 'must be printable ASCII')
      .refine((f) => f.split('{}').length === 2, { message: 'must hold exactly one {}' })
      .optional()
      .describe('The header\'s value, "{}" standing for the secret ("Bearer {}"); default "{}".'),
    file: z.string().regex(/^\/[\x21-\x7e]*$/, 'must be an absolute path').optional()
      .describe('A file holding the value (a mounted secret; one trailing newline dropped), read at each create; default: the controller\'s variable of the same name.'),
  })
  .refine((s) => s.format === undefined || s.header !== undefined, { message: 'format needs header (it is the value of that header)', path: ['format'] });

export type SecretConfig = z.infer<typeof secretSchema>;

export const credentialsConfigShape = {
  stateDir: z
    .string()
    .regex(/^\/[\x21-\x7e]*$/, 'must be an absolute path')
    .optional()
    .describe('A directory only the controller\'s user can open (mode 0700): the deployment CA (ca.pem and ca-key.pem, 0600) is created there on first use. Needed by inspectHosts and secrets.')
    .meta({ title: 'Controller state directory', 'x-ui': { label: { en: 'Controller state directory', zh: '控制器状态目录' } } }),
  inspectHosts: z
    .array(allowHostSchema)
    .optional()
    .describe('Allowlist entries (exactly as a sandbox\'s allowHosts writes them, "*.example.com" too) whose TLS the egress proxy terminates with the deployment CA, to read each request (domain fronting refused; methods and paths apply). The sandbox trusts the CA. HTTP/2 and gRPC are not inspected.')
    .meta({ title: 'Inspected hosts', 'x-ui': { label: { en: 'Inspected hosts', zh: '检查的主机' } } }),
  secrets: z
    .array(secretSchema)
    .max(32)
    .optional()
    .describe('Secrets the egress proxy injects for sandboxes whose allowlist names their hosts: the sandbox gets a random placeholder of the same shape in the variable `name`, never the value.')
    .meta({ title: 'Secrets', 'x-ui': { label: { en: 'Secrets', zh: '密钥' } } }),
};

/** The cross-field rules: a state directory for the CA, one secret per name. */
export function credentialsConfigProblems(c: { stateDir?: string | undefined; inspectHosts?: readonly string[] | undefined; secrets?: readonly SecretConfig[] | undefined }): Array<{ path: (string | number)[]; message: string }> {
  const problems: Array<{ path: (string | number)[]; message: string }> = [];
  const wanted = (c.inspectHosts?.length ?? 0) > 0 || (c.secrets?.length ?? 0) > 0;
  if (wanted && c.stateDir === undefined) {
    problems.push({ path: ['stateDir'], message: 'is required with inspectHosts or secrets: the deployment CA is kept there' });
  }
  const seen = new Set<string>();
  for (const [i, s] of (c.secrets ?? []).entries()) {
    if (seen.has(s.name)) problems.push({ path: ['secrets', i, 'name'], message: `${s.name} is named twice` });
    seen.add(s.name);
  }
  return problems;
}
