/**
 * The rules for environment variables a caller sets: a sandbox spec's `env` (the container's own
 * environment) and exec's `env` (one command's). A name becomes `export NAME=...` in the
 * command's shell and `NAME=value` in a create body, so only names a shell can export are allowed
 * (no `=`, no spaces, no leading digit).
 */
import { z } from 'zod';

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
/**
 * The mark of a command's processes (exec/exec-script.ts EXEC_MARK_VAR), and the CA certificate
 * the sandbox's root idle process writes out (docker/ca-trust.ts): the controller's own.
 */
const RESERVED = /^(?:CAPYBARA_EXEC|CAPYBARA_CA_CERT)$/;

const envNameSchema = z
  .string()
  .regex(ENV_NAME_RE, 'is not a valid variable name (letters, digits and "_", not starting with a digit)')
  .refine((name) => !RESERVED.test(name), { message: 'is reserved: the controller\'s own (CAPYBARA_EXEC marks every process of a command, to find them for a kill; CAPYBARA_CA_CERT carries the deployment CA to the sandbox)' });

/**
 * An exec's `env` is exported by the command's own shell after it started, so it reaches only
 * that command and its children, which run as the sandbox user: any other name is the caller's
 * business, the loader's included (`LD_PRELOAD` for a profiler).
 */
export const execEnvNameSchema = envNameSchema;

/**
 * What the dynamic loader and glibc read before a program runs: glibc's secure-execution list
 * (sysdeps/generic/unsecvars.h, the variables glibc drops for a setuid program), whole families
 * where the list names several of one (LD_*, MALLOC_*), and GLIBC_TUNABLES.
 */
const LOADER = /^(?:LD_\w*|MALLOC_\w*|GLIBC_TUNABLES|GCONV_PATH|GETCONF_DIR|HOSTALIASES|LOCALDOMAIN|LOCPATH|NIS_PATH|NLSPATH|RESOLV_HOST_CONF|RES_OPTIONS|TMPDIR|TZDIR)$/;
/**
 * What bash reads from its environment before or while it runs a script: a file to source
 * (BASH_ENV, ENV), options and compatibility levels that change what a script means (SHELLOPTS,
 * BASHOPTS, BASH_COMPAT, POSIXLY_CORRECT), imported functions (BASH_FUNC_*), every other BASH*
 * variable, command lookup (PATH, EXECIGNORE, CDPATH), word splitting and globbing (IFS,
 * GLOBIGNORE), the trace prompt (PS4, whose expansions run commands under xtrace), limits on the
 * script itself (FUNCNEST, TMOUT) and the interactive start-up (PROMPT_COMMAND, INPUTRC).
 */
const SHELL = /^(?:BASH\w*|ENV|SHELLOPTS|POSIXLY_CORRECT|PATH|EXECIGNORE|CDPATH|IFS|GLOBIGNORE|GLOBSORT|PS4|FUNCNEST|TMOUT|PROMPT_COMMAND|INPUTRC)$/;

/**
 * A sandbox's own environment is inherited by every process in the container: the container's
 * root init and the controller's root execs (skills writes) included, and every bash script the
 * controller runs. A name the loader or bash reads before the program would let the spec run its
 * own code there, or change what the controller's scripts do. Names are open-ended (a workload's
 * API keys, its own settings), so an allowlist of names is not possible; what is refused is each
 * family the loader and bash read, whole. Per command, exec `env` may set any of them.
 */
export const containerEnvNameSchema = envNameSchema.refine((name) => !LOADER.test(name) && !SHELL.test(name), {
  message: 'is read by the dynamic loader or by bash before the program runs (glibc\'s secure-execution list: LD_*, GCONV_PATH, LOCPATH, MALLOC_*, TMPDIR, ...; BASH_ENV, ENV, PATH, IFS, SHELLOPTS, PS4, BASH_FUNC_*, ...), and the container\'s root processes and the controller\'s scripts run with the sandbox\'s environment: set it per command with exec env instead',
});

/** Locale variables: glibc loads the locale they name, so only a name, never a path. */
const LOCALE_NAME = /^(?:LANG|LANGUAGE|LC_\w+)$/;
/** `C.UTF-8`, `en_US.UTF-8@euro`, `de:en` (LANGUAGE is a list): no `/`, so never a file of the sandbox's. */
const LOCALE_VALUE = /^[A-Za-z0-9_.@+:-]*$/;

/** The problem with one spec env value, if any (the value of a name that is itself accepted). */
export function containerEnvValueProblem(name: string, value: string): string | undefined {
  if (LOCALE_NAME.test(name) && !LOCALE_VALUE.test(value)) {
    return 'is a locale variable: its value must be a locale name such as C.UTF-8 (letters, digits, "_", ".", "@", "+", ":", "-"), never a path';
  }
  return undefined;
}
