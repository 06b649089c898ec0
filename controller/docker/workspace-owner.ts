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
import { ustarHeader } from '../../common/index.js';
import { SANDBOX_UID } from '../spec/index.js';

const BLOCK = 512;
const MODE = 0o755;
/** 2026-01-01T00:00:00Z: the directory's mtime, fixed so that the bytes are. */
const MTIME = 1_767_225_600;

function header(): Buffer {
  return ustarHeader({ name: '/', mode: MODE, uid: SANDBOX_UID, gid: SANDBOX_UID, size: 0, mtime: MTIME, type: '5' });
}

/** The header and the two zero blocks that end an archive. */
export const WORKSPACE_OWNER_ARCHIVE: Buffer = Buffer.concat([header(), Buffer.alloc(2 * BLOCK)]);
