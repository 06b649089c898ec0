/** `capybara-egress report`: the allowlist a run needed, from the proxy's decision lines. */
export { AllowlistReport, REPORT_LIMITS, type ReportCounts } from './allowlist-report.js';
export { readLines, REPORT_USAGE, runReport, type ReportIo } from './report-command.js';
