/** The operator CLI (`capybara-sandbox`) as a library: tests and wrappers call runOperator. */
export { runOperator } from './run.js';
export type { OperatorIo } from './run.js';
export { OPERATOR_COMMANDS, commandOptions } from './args.js';
export { COMMAND_HELP, OPERATOR_HELP, commandHelp } from './help.js';
export { DOCTOR_CHECKS } from './doctor.js';
export type { DoctorCheck, DoctorCheckId } from './doctor.js';
export { KEEP_REASONS, decideOrphans } from './orphans.js';
