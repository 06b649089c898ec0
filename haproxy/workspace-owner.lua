-- The one archive the socket proxy lets into a container: it gives a sandbox's workspace volume to
-- the sandbox user. Every volume mount carries NoCopy (docker-schema.lua), so dockerd no longer
-- copies the image's /workspace into a new volume, and with the copy went the ownership it copied:
-- a fresh volume's root is root's, 0755, which the sandbox user (uid 1000) cannot write, and no
-- process in a container can change that (every one runs without CAP_CHOWN). dockerd can: it
-- extracts an archive put into a container (PUT /containers/<name>/archive?path=/workspace) as
-- root, confined to the container's own filesystem, and an entry named "/" is the directory
-- extracted into, whose owner and mode it then sets. So the archive is exactly one directory entry
-- "/", uid and gid 1000, mode 0755, and nothing else: no file, no link, no second entry. Its
-- bytes are fixed; the controller sends these same bytes (controller/docker/workspace-owner.ts,
-- held equal by test/haproxy/body-check.test.ts). Pure: the standalone lua5.4 tests load it too.

local M = {}

M.UID, M.GID, M.MODE = 1000, 1000, 493 -- 0755
-- 2026-01-01T00:00:00Z: the directory's mtime (a fixed one, so the bytes are fixed).
M.MTIME = 1767225600

local function octal(n, width)
  return string.format('%0' .. (width - 1) .. 'o', n) .. '\0'
end

local function header()
  local fields = {
    ('/'):rep(1) .. ('\0'):rep(99), -- name
    octal(M.MODE, 8), octal(M.UID, 8), octal(M.GID, 8),
    octal(0, 12), -- size
    octal(M.MTIME, 12),
    (' '):rep(8), -- checksum, counted as blanks
    '5', -- a directory
    ('\0'):rep(100), -- link name
    'ustar\0', '00',
    ('\0'):rep(32), ('\0'):rep(32), -- user and group names
    octal(0, 8), octal(0, 8), -- device numbers
    ('\0'):rep(155), -- prefix
  }
  local h = table.concat(fields)
  h = h .. ('\0'):rep(512 - #h)
  local sum = 0
  for i = 1, #h do sum = sum + h:byte(i) end
  return h:sub(1, 148) .. string.format('%06o', sum) .. '\0 ' .. h:sub(157)
end

-- The header and the two zero blocks that end an archive.
M.ARCHIVE = header() .. ('\0'):rep(1024)

-- nil when `body` is that archive, else the deny reason.
function M.check(body)
  if body == M.ARCHIVE then return nil end
  return 'archive_not_allowed'
end

return M
