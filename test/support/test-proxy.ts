/** Starts the egress proxy in-process on loopback for a test, with its log lines captured. */
import { buildPolicy, type Policy, type PolicyInput } from '../../policy/index.js';
import { type ProxyLimits, defaultConnect, type Connect, createLookup, createLogger, createEgressProxy, type EgressProxy, type MemoryBudget } from '../../proxy/index.js';
import type { Inspection } from '../../proxy/admission/index.js';
import { captureLogs } from './log-capture.js';

export interface TestProxy {
  readonly port: number;
  readonly proxy: EgressProxy;
  readonly logs: Record<string, unknown>[];
  /** `address:port` of every upstream connect attempt, in order. */
  readonly dialed: string[];
  close(): Promise<void>;
}

export function policyOf(input: PolicyInput): Policy {
  const built = buildPolicy(input);
  if (!built.ok) throw new Error(JSON.stringify(built.problems));
  return built.policy;
}

export async function startTestProxy(options: {
  policy: PolicyInput;
  dnsServer?: string;
  dnsTimeoutMs?: number;
  limits?: Partial<ProxyLimits>;
  connect?: Connect;
  memory?: MemoryBudget;
  /** The deployment CA's leaves and the upstream trust store, for inspected entries. */
  inspection?: Inspection;
  /** Where it listens: 127.0.0.1 and a free port unless given (only inside a namespace of the test's own). */
  listen?: { host: string; port: number };
}): Promise<TestProxy> {
  const { logs, sink } = captureLogs();
  const dialed: string[] = [];
  const connect = options.connect ?? defaultConnect;
  const proxy = createEgressProxy({
    policy: policyOf(options.policy),
    lookup: createLookup({ servers: options.dnsServer ? [options.dnsServer] : [], timeoutMs: options.dnsTimeoutMs ?? 1_000 }),
    logger: createLogger('debug', sink),
    limits: { dnsTimeoutMs: options.dnsTimeoutMs ?? 1_000, ...options.limits },
    connect: (address, port, purpose) => {
      dialed.push(address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`);
      return connect(address, port, purpose);
    },
    ...(options.memory ? { memory: options.memory } : {}),
    inspection: options.inspection,
  });
  const { port } = await proxy.listen(options.listen?.host ?? '127.0.0.1', options.listen?.port ?? 0);
  return { port, proxy, logs, dialed, close: () => proxy.close() };
}
