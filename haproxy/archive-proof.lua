-- Proof that an archive may be put into a container. For an archive call dockerd mounts the
-- container's mount points ON THE HOST: it bind-mounts each volume under the container's root,
-- resolving its target through what it mounted before, and unmounts them all afterwards
-- (umount2 MNT_DETACH on the resolved path, following whatever symlink is there by then). A
-- mount point that the image's own symlinks (/var/run -> /run, /opt -> /workspace/o) lead into
-- another mount is resolved through that mount's content, which a container sharing the volume
-- controls: a volume mounted over a host directory, or a host mount detached, each won by a
-- review. The create rules cannot see the image, so the archive call is where this is decided:
-- before one goes on, socket-proxy.lua asks dockerd for the container, and this file judges the
-- answer. It passes only when the container has exactly one mount point, a volume, where the
-- archive goes (one of the controller's own targets: docker-schema.lua's S.VOLUME_TARGETS). With
-- one mount point there is no other mount for it to lie in, whatever the image's symlinks, and
-- its path runs through the container's root alone, which every container has read-only
-- (ReadonlyRootfs is pinned): nothing can swap a symlink into it. The controller puts archives
-- only into such containers (a sandbox's workspace through a hand-over container of its own,
-- a registration into an egress proxy). The request then names the container by the id judged,
-- so no container made under the same name meanwhile receives it.
--
-- dockerd's own network files are mount points too, which inspect's Mounts does not list: once a
-- container has run (ResolvConfPath, HostnamePath, HostsPath set at its first start), dockerd also
-- bind-mounts its resolv.conf, hostname and hosts at /etc/... for every archive call, after the
-- volume, resolving each path through the volume wherever the image's symlinks lead it there
-- (`/workspace -> /etc`), and mount(2) follows a symlink a racer sharing the volume swapped in:
-- the container's resolv.conf over any host file (a review won in 39 calls). So the workspace
-- archive goes only into a container that never ran, and to keep it so until dockerd takes the
-- archive (a start after this answer would hold the container until the archive call waits its
-- turn), only into one named `<name>.handover`, which routes.map never lets start or restart.
-- A registration goes into a running egress proxy, network files and all: there the image is what
-- keeps /etc out of the registration volume, so only a container of an image the operator listed
-- exactly (SOCKET_PROXY_IMAGES, never merely one from a listed registry) receives it.
-- Pure (no HAProxy API), so the standalone lua5.4 tests judge answers too.

local json = require('json-strict')
local schema = require('docker-schema')

local M = {}

M.OK = 'ok'
M.NOT_FOUND = 'container_not_found'            -- answered 404, the way dockerd answers a missing container
M.MOUNT = 'archive_mount_not_allowed'          -- a mount point other than the one volume where the archive goes
M.NO_VOLUME = 'archive_target_not_volume'      -- no volume where the archive goes
M.FAILED = 'archive_proof_failed'              -- dockerd did not answer as expected: refused
M.STARTED = 'archive_container_started'        -- a workspace archive into a container that has run
M.NOT_HANDOVER = 'archive_container_not_handover' -- a workspace archive into a container not named *.handover
M.IMAGE = 'archive_image_not_listed'           -- a registration into a container of an image not listed exactly

-- Where each archive route puts its archive (routes.map fixes the path query of both).
M.DESTINATIONS = {
  container_archive = '/workspace',
  tenant_register = '/var/lib/capybara-egress/tenants',
}

-- A shard's inspect lists every sandbox network it is on (a few hundred): far broader than any
-- request body, and still bounded (a bridge takes at most 1,023 ports).
local ANSWER_BREADTH = { max_nodes = 200000, max_members = 8192 }

function M.path(name)
  return '/containers/' .. name .. '/json'
end

local member = json.member

-- Where dockerd keeps a container's network files: empty until its first start.
local NETWORK_FILES = { 'ResolvConfPath', 'HostnamePath', 'HostsPath' }

local function quoted(path)
  return (path:sub(1, 64):gsub('[^A-Za-z0-9_./%-]', '?'))
end

-- The verdict on dockerd's answer (status, body) to M.path(name), for an archive to `route`;
-- with ok, the container's full id. settings: proxy-settings.lua's (the listed images).
function M.judge(name, route, status, body, settings)
  local destination = M.DESTINATIONS[route]
  if destination == nil or type(name) ~= 'string' then return M.FAILED end
  if status == 404 then return M.NOT_FOUND end
  if status ~= 200 or type(body) ~= 'string' then return M.FAILED end
  local container = json.parse(body, false, false, ANSWER_BREADTH)
  if container == nil then return M.FAILED end
  local id, seen, mounts = member(container, 'Id'), member(container, 'Name'), member(container, 'Mounts')
  if type(id) ~= 'string' or #id ~= 64 or id:find('^[0-9a-f]+$') == nil then return M.FAILED end
  if seen ~= '/' .. name then return M.FAILED end
  if type(mounts) ~= 'table' or mounts.tag ~= 'array' then return M.FAILED end
  -- dockerd lists the mounts in no fixed order: the refusal names the first offender by path.
  local received, offender = false, nil
  for i = 1, mounts.n do
    local m = mounts[i]
    if type(m) ~= 'table' or m.tag ~= 'object' then return M.FAILED end
    local kind, target = member(m, 'Type'), member(m, 'Destination')
    if type(kind) ~= 'string' or type(target) ~= 'string' then return M.FAILED end
    if kind == 'volume' and target == destination and schema.VOLUME_TARGETS[target] and not received then
      received = true
    elseif offender == nil or target < offender then
      offender = target
    end
  end
  if offender ~= nil then return M.MOUNT .. ':' .. quoted(offender) end
  if not received then return M.NO_VOLUME .. ':' .. destination end
  if route == 'container_archive' then
    if not name:find('%.handover$') then return M.NOT_HANDOVER end
    for _, key in ipairs(NETWORK_FILES) do
      local path = member(container, key)
      if type(path) ~= 'string' then return M.FAILED end
      if path ~= '' then return M.STARTED end
    end
  else
    local config = member(container, 'Config')
    if type(config) ~= 'table' or config.tag ~= 'object' then return M.FAILED end
    local image = member(config, 'Image')
    if type(image) ~= 'string' or type(settings) ~= 'table' or type(settings.images) ~= 'table' then return M.FAILED end
    if not settings.images[image] then return M.IMAGE .. ':' .. (image:sub(1, 128):gsub('[^A-Za-z0-9_./:@%-]', '?')) end
  end
  return M.OK, id
end

return M
