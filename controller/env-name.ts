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
