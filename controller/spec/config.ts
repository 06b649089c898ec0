/**
 * The deployment config of the sandbox-docker plugin. This zod schema is the single source:
 * the TypeScript type is inferred from it and the JSON Schema in `.capybara-plugin/plugin.json`
 * is generated from it. Strict: an unknown key is an error naming the key.
 */
import { z } from 'zod';
import { IMAGES } from '../../common/index.js';
import { SandboxError } from './errors.js';
import { describeIssues } from './input-issues.js';
import { ASCII_WORD } from './ascii-body.js';

const ENDPOINT_RE = /^(tcp:\/\/(\[[^\]]+\]|[^:/]+):\d{1,5}\/?|unix:\/\/\/.+)$/;

export const deploymentConfigSchema = z
  .strictObject({
    endpoint: z
      .string()
      .regex(ENDPOINT_RE, 'must be tcp://host:port or unix:///path')
      .describe('Address of the Docker socket proxy: tcp://host:port or unix:///path. The controller never talks to docker.sock directly.')
      .meta({ title: 'Docker proxy endpoint', 'x-ui': { label: { en: 'Docker proxy endpoint', zh: 'Docker 代理地址' } } }),
    runtime: z
      .enum(['runc', 'runsc'])
      .default('runc')
      .describe('OCI runtime of sandbox containers; runsc (gVisor) must be registered in the Docker daemon.')
      .meta({ title: 'Container runtime', 'x-ui': { label: { en: 'Container runtime', zh: '容器运行时' } } }),
    network: z
      .string()
      .regex(/^cap[a-zA-Z0-9_.-]*$/, 'must start with "cap" and use only letters, digits, "_", "." or "-"')
      .default('capybara-sandbox')
      .describe('Shared bridge network for egress proxies and open-tier sandboxes; created with inter-container traffic off when absent.')
      .meta({ title: 'Sandbox network', 'x-ui': { label: { en: 'Sandbox network', zh: '沙箱网络' } } }),
    egressProxyImage: z
      .string()
      .min(1)
      .regex(ASCII_WORD, 'must be an ASCII image reference')
      .default(IMAGES.egress)
      .describe('Image of the per-sandbox egress allowlist proxy.')
      .meta({ title: 'Egress proxy image', 'x-ui': { label: { en: 'Egress proxy image', zh: '出站代理镜像' } } }),
    volumeDriver: z
      .string()
      .min(1)
      .regex(ASCII_WORD, 'must be an ASCII driver name')
      .optional()
      .describe('Volume driver for workspace volumes; when set, size=<diskMb>M is passed so diskMb is enforced. Unset: the local driver, which cannot limit size.')
      .meta({ title: 'Volume driver', 'x-ui': { label: { en: 'Volume driver', zh: '卷驱动' } } }),
    tlsCertDir: z
      .string()
      .regex(/^\//, 'must be an absolute path')
      .optional()
      .describe('Directory (a mounted secret) holding ca.pem, cert.pem and key.pem for mTLS to a remote tcp:// engine. Certificates are never read from the environment.')
      .meta({ title: 'Engine client certificate directory', 'x-ui': { label: { en: 'Engine client certificate directory', zh: '引擎客户端证书目录' } } }),
    allowedImages: z
      .array(z.string().min(1).regex(ASCII_WORD, 'must be an ASCII image reference'))
      .min(1)
      .optional()
      .describe('Images a sandbox may run, each exactly as spec.image names it. Unset: any image the engine has or can pull, so the host application alone decides (an image\'s own HEALTHCHECK, ENV and VOLUME lines apply in the sandbox).')
      .meta({ title: 'Allowed images', 'x-ui': { label: { en: 'Allowed images', zh: '允许的镜像' } } }),
    allowOpenEgress: z
      .boolean()
      .default(false)
      .describe('Allow limits.egress = "open" (a sandbox on the shared bridge can reach whatever the host network reaches). Off by default.')
      .meta({ title: 'Allow open egress', 'x-ui': { label: { en: 'Allow open egress', zh: '允许开放出站' } } }),
  })
  .describe('Deployment config of the sandbox-docker plugin.');

export type DeploymentConfig = Readonly<z.infer<typeof deploymentConfigSchema>>;
export type DeploymentConfigInput = z.input<typeof deploymentConfigSchema>;

/** Validates once at the entry point; the result is frozen and passed down. */
export function parseDeploymentConfig(input: unknown, source = 'extensionConfig."sandbox-docker"'): DeploymentConfig {
  const result = deploymentConfigSchema.safeParse(input);
  if (!result.success) {
    throw new SandboxError('invalid_config', `${source} is invalid: ${describeIssues(result.error, '')}`, { cause: result.error });
  }
  return Object.freeze(result.data);
}
