/**
 * What a policy in force deserves a warning for, said the same way at start, on every reload and
 * by --check: an empty allowlist (everything refused), and report mode (an operator must never
 * leave a proxy that allows every public host on without knowing it).
 */
import type { Policy } from '../../policy/index.js';
import type { Logger } from './log.js';

export const EMPTY_ALLOWLIST = 'the allowlist is empty: every request is refused';

export const REPORT_MODE =
  'report mode: hosts off allowHosts and ports off connectPorts are ALLOWED and logged would_deny; only malformed requests, IP literals and non-public addresses are refused. ' +
  'This is not a boundary: use it to learn an allowlist (capybara-egress report LOGFILE), then run in mode enforce';

/** The policy's warnings: the event each is logged as, and its sentence. */
export function policyWarnings(policy: Policy): { readonly event: 'report_mode' | 'empty_allowlist'; readonly message: string }[] {
  if (policy.mode === 'report') return [{ event: 'report_mode', message: REPORT_MODE }];
  if (policy.allowHosts.length === 0) return [{ event: 'empty_allowlist', message: EMPTY_ALLOWLIST }];
  return [];
}

/** Logs the policy's warnings, each naming where the policy came from. */
export function logPolicyWarnings(log: Logger, policy: Policy, source: string): void {
  for (const w of policyWarnings(policy)) log.warn({ event: w.event, source, mode: policy.mode }, `${w.message} (${source})`);
}
