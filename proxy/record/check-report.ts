/** What `capybara-egress check` (--check) prints for a valid configuration: what the policy allows, and its warnings. */
import { describeRules, type Policy } from '../../policy/index.js';
import { policyWarnings } from './policy-warnings.js';

export function checkReport(sourceName: string, policy: Policy): string {
  const lines = [
    `${sourceName}: valid`,
    `  allowHosts (${policy.allowHosts.length}): ${policy.allowHosts.join(', ') || '(none)'}`,
    ...[...policy.entryRules].map(([entry, rules]) => `  ${entry}: ${policy.inspected.includes(entry) ? 'inside the inspected TLS' : 'plain HTTP only'}, ${describeRules(rules, Infinity)}`),
    ...(policy.inspected.length > 0 ? [`  inspected (${policy.inspected.length}): ${policy.inspected.join(', ')}: TLS terminated with the deployment CA`] : []),
    `  connectPorts: ${[...policy.connectPorts].join(', ')}`,
    `  mode: ${policy.mode}`,
    ...policyWarnings(policy).map((w) => `warning: ${w.message}`),
  ];
  return `${lines.join('\n')}\n`;
}
