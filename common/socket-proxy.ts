/**
 * The interface of the Docker socket proxy image (haproxy/) as other programs meet it: the
 * environment variables it reads. The operator CLI's `up` and the tests start it with these
 * names; haproxy/haproxy.cfg and its Lua code (haproxy/proxy-settings.lua) read them and
 * deploy/compose.yaml sets them, and test/common/names.test.ts keeps both to exactly this list.
 */
export const SOCKET_PROXY_ENV = {
  /** Listen address: `0.0.0.0:2375`, or `unix@/path` for a unix socket. */
  bind: 'SOCKET_PROXY_BIND',
  /** Path of the engine's socket inside the proxy container. */
  dockerSocket: 'DOCKER_SOCKET',
  /** The one network not named `cap-...` that callers may use: the controller's shared network. */
  sharedNetwork: 'SOCKET_PROXY_SHARED_NETWORK',
  /** Volume plugins allowed besides `local`, comma-separated: the controller's `volumeDriver`. */
  volumeDrivers: 'SOCKET_PROXY_VOLUME_DRIVERS',
  /** Images a container may run and a pull may fetch, comma-separated, exactly as named. */
  images: 'SOCKET_PROXY_IMAGES',
  /** Registries any image may come from, comma-separated host names (no IP literal, no localhost). */
  registries: 'SOCKET_PROXY_REGISTRIES',
  /** Ceiling of PidsLimit: the controller's pids limit. */
  maxPids: 'SOCKET_PROXY_MAX_PIDS',
  /** Ceiling of Memory in MiB (tmpfs sizes: half of it): the controller's maxLimits.memoryMb. */
  maxMemory: 'SOCKET_PROXY_MAX_MEMORY',
  /** Ceiling of NanoCpus in CPUs: the controller's maxLimits.cpu. */
  maxCpus: 'SOCKET_PROXY_MAX_CPUS',
} as const;
