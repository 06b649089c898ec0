/** The operator CLI (`capybara-sandbox`) as a library: tests and wrappers call runOperator. */
export { runOperator } from './run.js';
export type { OperatorIo } from './run.js';
export { OPERATOR_HELP } from './args.js';
export { DOCTOR_CHECKS } from './doctor.js';
export type { DoctorCheck, DoctorCheckId } from './doctor.js';
export { KEEP_REASONS, decideOrphans } from './orphans.js';
