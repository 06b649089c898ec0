/**
 * Micro-benchmark of one policy decision without I/O: checkTarget (parse + allowlist match + port)
 * then checkAddresses (classify the resolved address), against a 100,000-entry allowlist of exact
 * and `*.` entries. Each operation gets a freshly concatenated host string, as a request parser
 * would hand over, so V8's cached string hashes do not make the lookups look cheaper than they
 * are. Match alone and classify alone are timed too, to tell which half costs what.
 *
 * Time is the process's CPU time (user + system, all threads, so GC helpers count against us),
 * not wall time: on a shared two-core machine another job can stretch wall time several-fold,
 * while CPU time stays what one decision costs. Wall time is reported beside it.
 */
import { buildPolicy, checkAddresses, checkTarget, classifyAddress, type Policy } from '../policy/index.js';

export interface MicroResult {
  readonly label: string;
  /** CPU nanoseconds per operation (median round). */
  readonly nsPerOp: number;
  /** Wall-clock nanoseconds per operation (median round), for comparison. */
  readonly wallNsPerOp: number;
  readonly iterations: number;
}

export interface MicroOptions {
  readonly entries: number;
  readonly rounds: number;
  readonly iterationsPerRound: number;
  readonly warmup: number;
}

const PUBLIC_ADDRESS = ['93.184.215.14'];
const VARIANTS = 1024;

/** Half exact names, half wildcards, spread over many parent domains. */
function allowHosts(entries: number): string[] {
  const hosts: string[] = [];
  for (let i = 0; i < entries; i++) {
    hosts.push(i % 2 === 0 ? `host${i}.example${i % 997}.com` : `*.svc${i}.corp${i % 101}.net`);
  }
  return hosts;
}

function buildBenchPolicy(entries: number): Policy {
  const built = buildPolicy({ allowHosts: allowHosts(entries), connectPorts: [443] });
  if (!built.ok) throw new Error(`bench allowlist rejected: ${built.problems[0]?.message ?? ''}`);
  if (built.policy.allowlist.size !== entries) throw new Error(`allowlist has ${built.policy.allowlist.size} entries, expected ${entries}`);
  return built.policy;
}

/** Host names split in two, joined per operation into a fresh string. */
interface HostSet {
  readonly heads: readonly string[];
  readonly tails: readonly string[];
}

function hostSet(entries: number, make: (i: number) => [string, string]): HostSet {
  const heads: string[] = [];
  const tails: string[] = [];
  for (let v = 0; v < VARIANTS; v++) {
    const [h, t] = make(Math.floor((v * entries) / VARIANTS));
    heads.push(h);
    tails.push(t);
  }
  return { heads, tails };
}

function median(values: number[]): number {
  values.sort((x, y) => x - y);
  return values[Math.floor(values.length / 2)] ?? NaN;
}

/** Median ns/op over rounds, after a warm-up; `op` returns something so the work is not dropped. */
function time(op: (i: number) => unknown, options: MicroOptions): Omit<MicroResult, 'label'> {
  let sink = 0;
  for (let i = 0; i < options.warmup; i++) if (op(i) !== undefined) sink += 1;
  const cpu: number[] = [];
  const wall: number[] = [];
  for (let r = 0; r < options.rounds; r++) {
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < options.iterationsPerRound; i++) if (op(i) !== undefined) sink += 1;
    const elapsed = Number(process.hrtime.bigint() - t0);
    const c = process.cpuUsage(c0);
    cpu.push(((c.user + c.system) * 1000) / options.iterationsPerRound);
    wall.push(elapsed / options.iterationsPerRound);
  }
  if (sink < 0) throw new Error('unreachable');
  return { nsPerOp: median(cpu), wallNsPerOp: median(wall), iterations: options.rounds * options.iterationsPerRound };
}

export function runPolicyMicro(options: MicroOptions): MicroResult[] {
  const policy = buildBenchPolicy(options.entries);
  const even = (i: number): number => i - (i % 2);
  const odd = (i: number): number => even(i) + 1;
  const cases: { label: string; hosts: HostSet; expect: boolean }[] = [
    { label: 'decision, hit (exact)', expect: true, hosts: hostSet(options.entries, (i) => [`host${even(i)}.`, `example${even(i) % 997}.com`]) },
    { label: 'decision, hit (*.wildcard)', expect: true, hosts: hostSet(options.entries, (i) => ['api.v2.', `svc${odd(i)}.corp${odd(i) % 101}.net`]) },
    // A miss that still walks to a wildcard-depth parent lookup (3 labels), the costlier kind.
    { label: 'decision, miss', expect: false, hosts: hostSet(options.entries, (i) => ['api.', `svc${odd(i)}.nowhere${i % 101}.net`]) },
  ];

  const results: MicroResult[] = [];
  for (const c of cases) {
    const { heads, tails } = c.hosts;
    const decide = (i: number): unknown => {
      const k = i & (VARIANTS - 1);
      const target = checkTarget(policy, (heads[k] as string) + (tails[k] as string), 443);
      return target.allowed ? checkAddresses(target, PUBLIC_ADDRESS) : target;
    };
    const sample = decide(0) as { allowed: boolean };
    if (sample.allowed !== c.expect) throw new Error(`${c.label}: expected allowed=${c.expect}`);
    results.push({ label: c.label, ...time(decide, options) });
  }

  const wild = cases[1]?.hosts as HostSet;
  const match = (i: number): unknown => policy.allowlist.match((wild.heads[i & (VARIANTS - 1)] as string) + (wild.tails[i & (VARIANTS - 1)] as string));
  results.push({ label: 'allowlist.match only (*.wildcard hit)', ...time(match, options) });
  results.push({ label: 'classifyAddress only (IPv4)', ...time(() => classifyAddress(PUBLIC_ADDRESS[0] as string), options) });
  return results;
}
