/**
 * The one rule for environment variable names, used by the sandbox spec's `env` and by exec's
 * `env`: a name becomes `export NAME=...` in the command's shell and `NAME=value` in a create
 * body, so only names a shell can export are allowed (no `=`, no spaces, no leading digit).
 */
import { z } from 'zod';

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

export const envNameSchema = z
  .string()
  .regex(ENV_NAME_RE, 'is not a valid variable name (letters, digits and "_", not starting with a digit)');

/**
 * Variables that change what a shell or the dynamic loader runs. The sandbox's own environment is
 * inherited by every process in the container, the controller's root execs (skills writes) and the
 * container's root init included, so the sandbox could otherwise make them run its own code.
 * (An exec's `env` reaches only that command, which runs as the sandbox user: any name is fine.)
 */
const LOADER_OR_SHELL = /^(?:LD_\w*|BASH_FUNC_\w*|BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|PATH|IFS|CDPATH|GLOBIGNORE|PROMPT_COMMAND)$/;

export const containerEnvNameSchema = envNameSchema.refine((name) => !LOADER_OR_SHELL.test(name), {
  message: 'changes what shells or the dynamic loader run (LD_*, BASH_ENV, ENV, PATH, ...), and the controller runs commands as root in the sandbox with its environment: set it per command with exec env instead',
});
