-- Proof that the image of a container create with a volume declares no volume of its own. dockerd
-- makes an anonymous volume at create for every VOLUME line of the image, whatever the request
-- says, and runc mounts it at start by path, after the request's volumes: an image volume at
-- /w/p/q inside the request's volume at /w is made through that volume's content, which a
-- container sharing it swaps meanwhile, and runc's os.MkdirAll on the path it resolved a moment
-- before (CVE-2024-45310 in the runc here) created a directory in a root-only host directory
-- (a review, through the proxy, with an image listed by name). The create rules see only the
-- request's mounts (docker-schema.lua: nothing mounted inside a volume, a volume where the images'
-- own symlinks lead alone), never the image's. So before a create that carries a volume goes on,
-- socket-proxy.lua asks dockerd for its image, and this file judges the answer: it passes only
-- when the image declares no volume. Images listed by name are the only ones a volume goes with
-- (docker-schema.lua), and the project's declare none. The create still names its image by that
-- listed name, not by the id judged: only a pull of the listed name itself, from the registry the
-- operator trusts for it, can move the name in between. Pure (no HAProxy API), so the standalone
-- lua5.4 tests judge answers too.

local json = require('json-strict')

local M = {}

M.OK = 'ok'
M.VOLUME = 'mount_image_volume'      -- the image declares a volume (named by its path)
M.NOT_FOUND = 'image_not_found'      -- answered 404, the way dockerd answers a create of a missing image
M.FAILED = 'image_proof_failed'      -- dockerd did not answer as expected: refused

-- The request that asks for it. `ref` is an image the schema admitted (image-ref.lua's alphabet:
-- letters, digits, "_", ".", ":", "/", "@", "-"), listed by name.
function M.path(ref)
  return '/images/' .. ref .. '/json'
end

local member = json.member

local function quoted(path)
  return (path:sub(1, 64):gsub('[^A-Za-z0-9_./%-]', '?'))
end

-- The verdict on dockerd's answer (status, body) to M.path(ref).
function M.judge(status, body)
  if status == 404 then return M.NOT_FOUND end
  if status ~= 200 or type(body) ~= 'string' then return M.FAILED end
  local image = json.parse(body, false)
  if image == nil then return M.FAILED end
  local config = member(image, 'Config')
  if config == nil or config == json.NULL then return M.OK end
  if type(config) ~= 'table' or config.tag ~= 'object' then return M.FAILED end
  local volumes = member(config, 'Volumes')
  if volumes == nil or volumes == json.NULL then return M.OK end
  if type(volumes) ~= 'table' or volumes.tag ~= 'object' then return M.FAILED end
  if #volumes.keys == 0 then return M.OK end
  -- Named by the first path in order, so that a refusal reads the same every time.
  local first = nil
  for _, path in ipairs(volumes.keys) do
    if first == nil or path < first then first = path end
  end
  return M.VOLUME .. ':' .. quoted(first)
end

return M
