/**
 * Turns zod's issues about a caller's input into one sentence a person can act on: each issue as
 * `path: problem`, unknown keys named. Used for the deployment config, the sandbox spec and exec
 * options, so every refusal at the edge reads the same way.
 */
import type { z } from 'zod';

export function describeIssues(error: z.ZodError, root: string): string {
  return error.issues
    .map((issue) => {
      const path = issue.path.reduce<string>(
        (at, seg) => (typeof seg === 'number' ? `${at}[${seg}]` : at === '' ? String(seg) : `${at}.${String(seg)}`),
        root,
      );
      if (issue.code === 'unrecognized_keys') {
        return `${path || '(root)'}: unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`;
      }
      // A record key's own problems (an environment name) are nested: say those, not zod's
      // "Invalid key in record".
      const message = issue.code === 'invalid_key' && issue.issues.length > 0 ? issue.issues.map((inner) => inner.message).join('; ') : issue.message;
      return `${path || '(root)'}: ${message}`;
    })
    .join('; ');
}
