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
import { credentialsConfigProblems, credentialsConfigShape } from './credentials-config.js';
import { DEFAULT_ADDRESS_POOL, DEFAULT_SUBNET_PREFIX, SUBNET_PREFIX_MAX, SUBNET_PREFIX_MIN, addressPoolProblem } from './address-pool.js';

const ENDPOINT_RE = /^(tcp:\/\/(\[[^\]]+\]|[^:/]+):\d{1,5}\/?|unix:\/\/\/.+)$/;
/** A volume plugin name, or empty (the local driver: one compose variable can say "none" to both
 * the controller and the socket proxy). */
const VOLUME_DRIVER_RE = /^(?!.*\.\.)([a-zA-Z0-9][a-zA-Z0-9_.-]{0,127})?$/;

/** Node fires a longer timer at once (after a warning): a command would be killed at once. */
const MAX_TIMER_MS = 2_147_483_647;
const MIB = 1024 * 1024;
/** The socket proxy's log caps (haproxy/docker-schema.lua LOG_MAX_BYTES, LOG_MAX_FILES; test/haproxy/mirrors.test.ts). */
export const LOG_MAX_SIZE_MB_MAX = 100;
export const LOG_MAX_FILES_MAX = 5;

/**
 * The largest value a caller may ask for of each numeric limit (a spec's `limits`, exec and
 * readFile options); above it the call is refused `invalid_spec` before any engine call. The
 * defaults keep one caller from asking the engine, or the controller's own memory, for what no
 * sandbox needs (`memoryMb: 1e9`, a 1 TiB output cap).
 */
const maxLimitsSchema = z.strictObject({
  cpu: z.number().finite().positive().max(1024).default(4).describe('Largest limits.cpu (CPUs).'),
  memoryMb: z.number().int().positive().max(16 * MIB).default(16_384).describe('Largest limits.memoryMb (MiB).'),
  diskMb: z.number().int().positive().max(1024 * MIB).default(102_400).describe('Largest limits.diskMb (MiB).'),
  execTimeoutMs: z.number().int().positive().max(MAX_TIMER_MS).default(4 * 3_600_000).describe('Largest exec timeoutMs; also the default timeout when it is below 10 minutes.'),
  outputBytes: z.number().int().positive().max(1024 * MIB).default(16 * MIB).describe('Largest exec maxOutputBytes (per stream, held in the controller\'s memory); also the default cap when it is below 1 MiB.'),
  readBytes: z.number().int().positive().max(2048 * MIB).default(256 * MIB).describe('Largest readFile maxBytes, and the size above which a readFile without maxBytes fails with file_too_large.'),
});

export const deploymentConfigSchema = z
  .strictObject({
    endpoint: z
      .string()
      .regex(ENDPOINT_RE, 'must be tcp://host:port or unix:///path')
      .refine((e) => {
        const port = /^tcp:\/\/.*:(\d+)\/?$/.exec(e)?.[1];
        return port === undefined || (/^[1-9]/.test(port) && Number(port) <= 65535);
      }, { message: 'must have a port from 1 to 65535, without leading zeros' })
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
      // To dockerd a driver name is a path to a plugin socket (/run/docker/plugins/<name>.sock):
      // a plain name only, as the socket proxy's SOCKET_PROXY_VOLUME_DRIVERS takes it.
      .regex(VOLUME_DRIVER_RE, 'must be a plugin name: letters, digits, "_", "." or "-", starting with a letter or digit, no "/" and no ".."')
      .optional()
      .describe('Volume plugin for workspace volumes; when set, size=<diskMb>M is passed so diskMb is enforced. The socket proxy must list the same name in SOCKET_PROXY_VOLUME_DRIVERS. Unset or empty: the local driver, which cannot limit size.')
      .meta({ title: 'Volume driver', 'x-ui': { label: { en: 'Volume driver', zh: '卷驱动' } } }),
    logMaxSizeMb: z
      .number()
      .int('must be a whole number of MiB')
      .min(1)
      .max(LOG_MAX_SIZE_MB_MAX, `must be at most ${LOG_MAX_SIZE_MB_MAX} (the socket proxy refuses larger log files)`)
      .default(10)
      .describe(`Size of one log file of each sandbox container and egress proxy (json-file max-size), in MiB; at most ${LOG_MAX_SIZE_MB_MAX}.`)
      .meta({ title: 'Log file size (MiB)', 'x-ui': { label: { en: 'Log file size (MiB)', zh: '日志文件大小 (MiB)' } } }),
    logMaxFiles: z
      .number()
      .int('must be a whole number')
      .min(1)
      .max(LOG_MAX_FILES_MAX, `must be at most ${LOG_MAX_FILES_MAX} (the socket proxy refuses more)`)
      .default(3)
      .describe(`Log files kept per container (json-file max-file); at most ${LOG_MAX_FILES_MAX}. A container's log never exceeds logMaxSizeMb x logMaxFiles.`)
      .meta({ title: 'Log files kept', 'x-ui': { label: { en: 'Log files kept', zh: '保留的日志文件数' } } }),
    addressPool: z
      .string()
      .default(DEFAULT_ADDRESS_POOL)
      .describe('Private IPv4 block (CIDR) from which each sandbox network gets its own subnet; reserve it for the controller: no other network, route or daemon default-address-pools entry may overlap it.')
      .meta({ title: 'Sandbox address pool', 'x-ui': { label: { en: 'Sandbox address pool', zh: '沙箱地址池' } } }),
    subnetPrefix: z
      .number()
      .int('must be a whole prefix length')
      .min(SUBNET_PREFIX_MIN)
      .max(SUBNET_PREFIX_MAX, `must be at most ${SUBNET_PREFIX_MAX} (a sandbox, its gateway and its egress proxy need 3 addresses)`)
      .default(DEFAULT_SUBNET_PREFIX)
      .describe('Prefix length of each sandbox network\'s subnet (28: 16 addresses, 4,096 networks in a /16 pool).')
      .meta({ title: 'Sandbox subnet prefix', 'x-ui': { label: { en: 'Sandbox subnet prefix', zh: '沙箱子网前缀' } } }),
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
    maxLimits: maxLimitsSchema
      .prefault({})
      .describe('Upper bounds of the numeric limits a caller may ask for: cpu, memoryMb, diskMb (spec limits), execTimeoutMs and outputBytes (exec options), readBytes (readFile). Each key has a default.')
      .meta({ title: 'Limit ceilings', 'x-ui': { label: { en: 'Limit ceilings', zh: '资源上限' } } }),
    persistentHome: z
      .boolean()
      .default(false)
      .describe('With a persistent workspace, keep the image\'s HOME (/workspace in the sandbox image), so dotfiles an earlier sandbox wrote there (.bashrc, .gitconfig, Python .pth files, pip and curl config) take effect in the next one. Off by default: HOME is then a fresh tmpfs at /home/sandbox.')
      .meta({ title: 'Persistent HOME', 'x-ui': { label: { en: 'Persistent HOME', zh: '持久化 HOME' } } }),
    sharedWorkspaces: z
      .boolean()
      .default(false)
      .describe('Let several running sandboxes mount one persistent workspace at once (each sees what the others write as they write it). Off by default: starting a sandbox whose persistent workspace a running sandbox holds fails with workspace_in_use.')
      .meta({ title: 'Shared workspaces', 'x-ui': { label: { en: 'Shared workspaces', zh: '共享工作区' } } }),
    commandIsolation: z
      .enum(['landlock', 'off'])
      .default('landlock')
      .describe('How the commands of one sandbox are kept apart. landlock: each command starts in a Landlock domain of its own, so no process of one command can ptrace another command\'s, read or write its memory, open its descriptors or read its environment (the kernel needs Landlock, Linux 5.13+, and the image util-linux 2.40+; a command that cannot be isolated fails exec_failed). off: every command of the sandbox user may do all of that to every other, for debuggers that attach across commands (strace -p, gdb -p); a process one command leaves behind can then forge a later command\'s output unless exec fresh is used.')
      .meta({ title: 'Command isolation', 'x-ui': { label: { en: 'Command isolation', zh: '命令隔离' } } }),
    egressIsolation: z
      .enum(['shared', 'sandbox'])
      .default('shared')
      .describe('How allowlist sandboxes get their egress proxy. shared: the shards of one egress service per engine (cap-egress.<k>) serve them all, each sandbox still on its own internal network and told apart by it, so a sandbox costs its own container only. sandbox: one proxy container per sandbox (its own process and memory; about 28 MiB of host memory each), for a deployment that wants one egress process per tenant. A sandbox with inspected hosts or secrets, and run --report, always get a proxy of their own.')
      .meta({ title: 'Egress isolation', 'x-ui': { label: { en: 'Egress isolation', zh: '出站隔离' } } }),
    egressShardSize: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(250)
      .describe('With egressIsolation shared: the sandboxes one shard of the egress serves before a new shard starts (at most 1,000: a container holds one network leg per sandbox). Concurrent creates can pass it by a few.')
      .meta({ title: 'Egress shard size', 'x-ui': { label: { en: 'Egress shard size', zh: '出站分片容量' } } }),
    warmSlots: z
      .number()
      .int()
      .min(0)
      .max(64)
      .default(0)
      .describe('With egressIsolation shared: sandbox networks each controller process keeps made and joined by a shard, ready for the next creates (a create takes one and skips making its network and the shard\'s leg; the pool refills in the background). Each is a network and a shard leg while it waits, and serves one sandbox; destroy removes it. 0: none.')
      .meta({ title: 'Warm network slots', 'x-ui': { label: { en: 'Warm network slots', zh: '预热网络槽位' } } }),
    allowOpenEgress: z
      .boolean()
      .default(false)
      .describe('Allow limits.egress = "open" (a sandbox on the shared bridge can reach whatever the host network reaches). Off by default.')
      .meta({ title: 'Allow open egress', 'x-ui': { label: { en: 'Allow open egress', zh: '允许开放出站' } } }),
    ...credentialsConfigShape,
  })
  .superRefine((c, ctx) => {
    const problem = addressPoolProblem(c.addressPool, c.subnetPrefix);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', path: ['addressPool'], message: problem });
    for (const p of credentialsConfigProblems(c)) ctx.addIssue({ code: 'custom', ...p });
  })
  .describe('Deployment config of the sandbox-docker plugin.');

export type DeploymentConfig = Readonly<z.infer<typeof deploymentConfigSchema>>;
export type DeploymentConfigInput = z.input<typeof deploymentConfigSchema>;
/** The log caps both containers of a sandbox get (container-spec.ts). */
export type LogCaps = Pick<DeploymentConfig, 'logMaxSizeMb' | 'logMaxFiles'>;
export type MaxLimits = DeploymentConfig['maxLimits'];

/** Validates once at the entry point; the result is frozen and passed down. */
export function parseDeploymentConfig(input: unknown, source = 'extensionConfig."sandbox-docker"'): DeploymentConfig {
  const result = deploymentConfigSchema.safeParse(input);
  if (!result.success) {
    throw new SandboxError('invalid_config', `${source} is invalid: ${describeIssues(result.error, '')}`, { cause: result.error });
  }
  // An empty volumeDriver is no driver at all: the local one.
  const { volumeDriver, ...rest } = result.data;
  return Object.freeze(volumeDriver === '' ? rest : result.data);
}
