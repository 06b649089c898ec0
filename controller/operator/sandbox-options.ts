/**
 * The sandbox options of `create` and `run` (--egress, --allow, --image, --cpu, --memory,
 * --workspace) as a `SandboxSpec`, and the comparison `run` makes before it reuses a sandbox
 * that already exists. Pure: the spec is checked again by the controller, which refuses what
 * it cannot enforce; here the command line is refused early with the option's own name.
 */
import { IMAGES } from '../../common/index.js';
import {
  DEFAULT_EGRESS_TIER,
  EGRESS_TIER_NAMES,
  TIERS,
  type EgressTier,
  type SandboxSpec,
  SandboxError,
  checkSandboxName,
  checkSandboxSpec,
  isSandboxError,
  persistentWorkspaceVolume,
} from '../spec/index.js';
import type { SandboxDetail } from './sandbox-detail.js';

/** The tiers `--allow` applies to: those with an egress proxy. */
const PROXY_TIERS = EGRESS_TIER_NAMES.filter((tier) => TIERS[tier].egressProxy);
export const DEFAULT_SANDBOX_IMAGE = IMAGES.sandbox;

/** What the command line asked for; `given` lists the options actually typed. */
export interface SandboxOptions {
  readonly egress: EgressTier;
  readonly allowHosts: readonly string[];
  readonly image: string;
  readonly cpu: number | undefined;
  readonly memoryMb: number | undefined;
  readonly workspaceKey: string | undefined;
  readonly given: ReadonlySet<'egress' | 'allow' | 'image' | 'cpu' | 'memory' | 'workspace'>;
}

export interface RawSandboxOptions {
  readonly egress?: string | undefined;
  readonly allow?: readonly string[] | undefined;
  readonly image?: string | undefined;
  readonly cpu?: string | undefined;
  readonly memory?: string | undefined;
  readonly workspace?: string | undefined;
}

function optionError(message: string): SandboxError {
  return new SandboxError('invalid_config', `${message} (see capybara-sandbox --help)`);
}

/** `cap-demo` stays as it is; `demo` means `cap-demo`. */
export function sandboxName(arg: string): string {
  return checkSandboxName(arg.startsWith('cap-') ? arg : `cap-${arg}`);
}

function positiveNumber(text: string, option: string, integer: boolean): number {
  const pattern = integer ? /^\d+$/ : /^\d+(\.\d+)?$/;
  const value = Number(text);
  if (!pattern.test(text) || !(value > 0)) {
    throw optionError(`${option} ${JSON.stringify(text)} must be a positive ${integer ? 'whole number' : 'number'}`);
  }
  return value;
}

export function parseSandboxOptions(raw: RawSandboxOptions): SandboxOptions {
  const given = new Set<SandboxOptions['given'] extends ReadonlySet<infer K> ? K : never>();
  for (const key of ['egress', 'allow', 'image', 'cpu', 'memory', 'workspace'] as const) if (raw[key] !== undefined) given.add(key);
  if (raw.egress !== undefined && !(EGRESS_TIER_NAMES as readonly string[]).includes(raw.egress)) {
    throw optionError(`--egress ${JSON.stringify(raw.egress)} is not one of ${EGRESS_TIER_NAMES.join(', ')}`);
  }
  const egress = (raw.egress ?? DEFAULT_EGRESS_TIER) as EgressTier;
  const allowHosts = (raw.allow ?? []).flatMap((entry) => entry.split(',')).map((h) => h.trim()).filter((h) => h !== '');
  if (raw.allow !== undefined && !TIERS[egress].egressProxy) {
    throw optionError(`--allow applies only to --egress ${PROXY_TIERS.join(' or ')}, not ${egress}`);
  }
  if (raw.workspace !== undefined) {
    try {
      persistentWorkspaceVolume(raw.workspace);
    } catch (err) {
      throw optionError(`--workspace: ${(err as Error).message}`);
    }
  }
  return {
    egress,
    allowHosts,
    image: raw.image ?? DEFAULT_SANDBOX_IMAGE,
    cpu: raw.cpu === undefined ? undefined : positiveNumber(raw.cpu, '--cpu', false),
    memoryMb: raw.memory === undefined ? undefined : positiveNumber(raw.memory, '--memory', true),
    workspaceKey: raw.workspace,
    given,
  };
}

/** The `sandbox@1` spec for sandbox `name` (`cap-<id>`). */
export function sandboxSpec(name: string, o: SandboxOptions): SandboxSpec {
  return {
    id: checkSandboxName(name).slice('cap-'.length),
    image: o.image,
    limits: {
      egress: o.egress,
      ...(TIERS[o.egress].egressProxy ? { allowHosts: [...o.allowHosts] } : {}),
      ...(o.cpu === undefined ? {} : { cpu: o.cpu }),
      ...(o.memoryMb === undefined ? {} : { memoryMb: o.memoryMb }),
    },
    ...(o.workspaceKey === undefined ? {} : { workspace: { key: o.workspaceKey, durability: 'persistent' as const } }),
  };
}

/** Where each part of the spec came from on the command line. */
const SPEC_FLAGS: ReadonlyArray<readonly [RegExp, string]> = [
  [/spec\.limits\.allowHosts(\[\d+\])?/g, '--allow'],
  [/spec\.limits\.cpu/g, '--cpu'],
  [/spec\.limits\.memoryMb/g, '--memory'],
  [/spec\.limits\.egress/g, '--egress'],
  [/spec\.image/g, '--image'],
  [/spec\.workspace(\.key)?/g, '--workspace'],
  [/spec\.id/g, 'NAME'],
];

/**
 * The controller's own spec check of what create or run would ask for, at parse time: a refusal
 * is a usage error naming the option that caused it (`--allow: "*" is not allowed: ...`), before
 * anything is said or asked of the engine.
 */
export function checkSpecOptions(name: string, o: SandboxOptions): void {
  try {
    checkSandboxSpec(sandboxSpec(name, o));
  } catch (err) {
    if (!isSandboxError(err, 'invalid_spec')) throw err;
    const detail = err.message.replace(/^The sandbox spec was refused: /, '').replace(/\.$/, '');
    throw optionError(SPEC_FLAGS.reduce((message, [path, flag]) => message.replace(path, flag), detail));
  }
}

function sameHosts(a: readonly string[], b: readonly string[]): boolean {
  const norm = (list: readonly string[]): string => [...new Set(list.map((h) => h.toLowerCase()))].sort().join(',');
  return norm(a) === norm(b);
}

/**
 * Why an existing sandbox is not what the options given on the command line ask for, one line
 * per difference; empty when `run` may reuse it. Options not typed are not compared: `run demo
 * -- ls` runs in demo as it is.
 */
export function optionMismatches(o: SandboxOptions, existing: SandboxDetail): string[] {
  const out: string[] = [];
  const tierGiven = o.given.has('egress') || o.given.has('allow');
  if (tierGiven && existing.tier !== o.egress) out.push(`egress is ${existing.tier}, not ${o.egress}`);
  if (o.given.has('allow') && !sameHosts(existing.allowHosts, o.allowHosts)) {
    out.push(`allowlist is [${existing.allowHosts.join(', ')}], not [${o.allowHosts.join(', ')}]`);
  }
  if (o.given.has('image') && existing.image !== o.image) out.push(`image is ${existing.image}, not ${o.image}`);
  if (o.cpu !== undefined && Number(existing.limits.nanoCpus) !== Math.round(o.cpu * 1e9)) {
    out.push(`cpu is ${Number(existing.limits.nanoCpus) / 1e9}, not ${o.cpu}`);
  }
  if (o.memoryMb !== undefined && Number(existing.limits.memory) !== o.memoryMb * 1024 * 1024) {
    out.push(`memory is ${Number(existing.limits.memory) / 1024 / 1024} MB, not ${o.memoryMb}`);
  }
  if (o.workspaceKey !== undefined && !existing.volumes.includes(persistentWorkspaceVolume(o.workspaceKey))) {
    out.push(`workspace ${o.workspaceKey} is not mounted (volumes: ${existing.volumes.join(', ') || 'none'})`);
  }
  return out;
}

/** One line describing what is about to be created, for the progress output. */
export function describeSpec(spec: SandboxSpec): string {
  const { egress = DEFAULT_EGRESS_TIER, allowHosts, cpu, memoryMb } = spec.limits;
  const tier = TIERS[egress].egressProxy ? `${egress} [${(allowHosts ?? []).join(', ') || 'nothing'}]` : egress;
  const limits = [cpu === undefined ? undefined : `cpu ${cpu}`, memoryMb === undefined ? undefined : `memory ${memoryMb} MB`].filter((x) => x !== undefined);
  const ws = spec.workspace === undefined ? '' : `, workspace ${spec.workspace.key}`;
  return `image ${spec.image}, egress ${tier}${limits.length > 0 ? `, ${limits.join(', ')}` : ''}${ws}`;
}
