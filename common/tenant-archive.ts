/**
 * A sandbox's registration with a shared egress proxy, as the archive the controller puts into the
 * egress container through the Docker API (PUT /containers/<egress>/archive?path=TENANTS_DIR):
 * dockerd writes `<slot>.json` into the directory the egress watches (policy/tenants.ts reads it).
 * The socket proxy admits exactly the archives this module writes (haproxy/tenant-archive.lua
 * rebuilds the header from the name, size and mtime it reads and compares every byte), so the
 * layout below is a contract with that file: one POSIX ustar header of a regular file, the
 * content, zero padding to a block, two zero blocks. Pure: no I/O.
 */
import { CodedError } from './coded-error.js';

/** Where the egress container keeps its registrations: a volume, so that a restart keeps them. */
export const TENANTS_DIR = '/var/lib/capybara-egress/tenants';

/** A slot's name: the file is `<slot>.json`, so no "/" and no leading "." can ever reach dockerd. */
export const SLOT_NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;

const BLOCK = 512;
/** The socket proxy's body cap (haproxy.cfg, 32 KiB) less the header and the two end blocks. */
export const REGISTRATION_MAX_BYTES = 32 * 1024 - 3 * BLOCK;

/** An allowHosts entry a shared egress takes: no `inspect`, no `secrets` (the socket proxy refuses both). */
export type RegistrationHost =
  | string
  | {
      readonly host: string;
      readonly tunnel?: 'tls' | 'opaque';
      readonly methods?: readonly string[];
      readonly paths?: readonly string[];
    };

/** The policy of a registration: policy/policy-file.ts's PolicyFileSchema, less what a shared egress refuses. */
export interface RegistrationPolicy {
  readonly version?: 1;
  readonly allowHosts: readonly RegistrationHost[];
  readonly connectPorts?: readonly number[];
  readonly mode?: 'enforce' | 'report';
}

/** A slot file's value, as policy/tenants.ts parses it: a sandbox's registration, or vacant. */
export type SlotFileValue =
  | { readonly version: 1; readonly vacant: true }
  | {
      readonly version: 1;
      readonly sandbox: string;
      readonly lifecycle: string;
      readonly subnet: string;
      readonly address: string;
      readonly policy: RegistrationPolicy;
    };

export class RegistrationArchiveError extends CodedError<'invalid_registration'> {}

function octal(n: number, width: number): string {
  return `${n.toString(8).padStart(width - 1, '0')}\0`;
}

/** One POSIX ustar header block: user and group names empty, no link name, no prefix. */
export function ustarHeader(entry: { name: string; mode: number; uid: number; gid: number; size: number; mtime: number; type: '0' | '5' }): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = (offset: number, text: string): void => {
    h.write(text, offset, 'latin1');
  };
  put(0, entry.name);
  put(100, octal(entry.mode, 8));
  put(108, octal(entry.uid, 8));
  put(116, octal(entry.gid, 8));
  put(124, octal(entry.size, 12));
  put(136, octal(entry.mtime, 12));
  put(148, ' '.repeat(8));
  put(156, entry.type);
  put(257, 'ustar\0');
  put(263, '00');
  put(329, octal(0, 8));
  put(337, octal(0, 8));
  let sum = 0;
  for (const byte of h) sum += byte;
  put(148, `${sum.toString(8).padStart(6, '0')}\0 `);
  return h;
}

function header(name: string, size: number, mtime: number): Buffer {
  return ustarHeader({ name, mode: 0o644, uid: 0, gid: 0, size, mtime, type: '0' });
}

/**
 * The archive of one regular file `<slot>.json` (mode 0644, owned by root) holding the registration
 * as compact JSON and a newline. `mtime` (seconds) defaults to now: the egress notices a change by
 * the file's inode, size, mtime and ctime.
 */
export function registrationArchive(slot: string, registration: SlotFileValue, mtime = Math.floor(Date.now() / 1000)): Buffer {
  if (!SLOT_NAME.test(slot)) {
    throw new RegistrationArchiveError('invalid_registration', `${JSON.stringify(slot)} is not a slot name: lower-case letters, digits, "_", "." and "-", at most 63, starting with a letter or digit`);
  }
  // An mtime field holds 11 octal digits.
  if (!Number.isInteger(mtime) || mtime < 0 || mtime >= 8 ** 11) throw new RegistrationArchiveError('invalid_registration', `${mtime} is not a file time in seconds`);
  const content = Buffer.from(`${JSON.stringify(registration)}\n`, 'utf8');
  if (content.length > REGISTRATION_MAX_BYTES) {
    throw new RegistrationArchiveError('invalid_registration', `the registration of ${slot} is ${content.length} bytes, over the ${REGISTRATION_MAX_BYTES} the socket proxy admits: shorten its allowlist`);
  }
  const padding = (BLOCK - (content.length % BLOCK)) % BLOCK;
  return Buffer.concat([header(`${slot}.json`, content.length, mtime), content, Buffer.alloc(padding + 2 * BLOCK)]);
}
