/**
 * The archive that hands a sandbox's workspace volume to the sandbox user. Every volume mount
 * carries NoCopy (container-spec.ts), so dockerd no longer copies the image's /workspace into a
 * new volume, nor the ownership it copied with it: a fresh volume's root is root's, 0755, and no
 * process in the container can change that (none holds CAP_CHOWN). dockerd extracts an archive put
 * into a container as root, confined to the container's filesystem, and an entry named "/" is the
 * directory extracted into: it gets that entry's owner and mode. One entry, nothing else, fixed
 * bytes: the socket proxy admits exactly these (haproxy/workspace-owner.lua builds the same, and
 * test/haproxy/body-check.test.ts holds the two equal).
 */
import { SANDBOX_UID } from '../spec/index.js';

const BLOCK = 512;
const MODE = 0o755;
/** 2026-01-01T00:00:00Z: the directory's mtime, fixed so that the bytes are. */
const MTIME = 1_767_225_600;

function octal(n: number, width: number): string {
  return `${n.toString(8).padStart(width - 1, '0')}\0`;
}

function header(): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = (offset: number, text: string): void => {
    h.write(text, offset, 'latin1');
  };
  put(0, '/');
  put(100, octal(MODE, 8));
  put(108, octal(SANDBOX_UID, 8));
  put(116, octal(SANDBOX_UID, 8));
  put(124, octal(0, 12));
  put(136, octal(MTIME, 12));
  put(148, ' '.repeat(8));
  put(156, '5');
  put(257, 'ustar\0');
  put(263, '00');
  put(329, octal(0, 8));
  put(337, octal(0, 8));
  let sum = 0;
  for (const byte of h) sum += byte;
  put(148, `${sum.toString(8).padStart(6, '0')}\0 `);
  return h;
}

/** The header and the two zero blocks that end an archive. */
export const WORKSPACE_OWNER_ARCHIVE: Buffer = Buffer.concat([header(), Buffer.alloc(2 * BLOCK)]);
