/** What the proxy writes down: its log, metrics, decision lines (capped per client) and the refusals it answers with. */
export * from './accept-failures.js';
export * from './decision-recorder.js';
export * from './decisions.js';
export * from './line-gate.js';
export * from './log.js';
export * from './metrics.js';
export type { SandboxOf } from './sandbox-metrics.js';
export * from './refusal.js';
export * from './policy-warnings.js';
export { checkReport } from './check-report.js';
