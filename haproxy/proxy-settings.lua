-- The socket proxy's settings from its environment, checked once when HAProxy loads the Lua code:
-- a bad value raises an error there, and HAProxy refuses to start (never a proxy that guesses).
-- Pure (the environment comes in as a function), so the standalone lua5.4 tests read it too.
--
--   SOCKET_PROXY_BIND             where HAProxy listens (haproxy.cfg): unix@/path, or address:port on a
--                                 network only the controller is on; required, no default
--   SOCKET_PROXY_SHARED_NETWORK   the one network not named "cap-..." callers may use; starts "cap"
--   SOCKET_PROXY_VOLUME_DRIVERS   comma list of volume plugin names allowed besides "local"; empty
--                                 or unset: none. To dockerd a driver name is a path (its plugin
--                                 socket is /run/docker/plugins/<name>.sock), so a name is a plain
--                                 word: no "/", no "..".
--   SOCKET_PROXY_IMAGES           comma list of images a container may run or a pull may fetch,
--                                 each exactly as the controller names it (image-ref.lua); unset:
--                                 the project's own images (the Dockerfile sets them).
--   SOCKET_PROXY_REGISTRIES       comma list of registries any image may come from besides those:
--                                 host names (a port only as listed), never an IP literal or
--                                 localhost; empty or unset: none, nothing else is ever pulled.
--   SOCKET_PROXY_MAX_PIDS         ceiling of a container's PidsLimit
--   SOCKET_PROXY_MAX_MEMORY       ceiling of a container's Memory, in MiB (the controller's
--                                 maxLimits.memoryMb); a tmpfs may be at most half of it, as the
--                                 controller sizes /tmp
--   SOCKET_PROXY_MAX_CPUS         ceiling of a container's NanoCpus, in CPUs (maxLimits.cpu)
--                                 Unset ceilings are the controller's defaults (M.DEFAULTS).
--   DOCKER_SOCKET                 the engine's socket (haproxy.cfg's backend too): where the
--                                 network proofs ask dockerd what an id names.
--
-- Any other SOCKET_PROXY_ variable, or a slip of one of these names, stops the start
-- (refuse_misspelt): never a proxy on a default its operator meant to change.

local image_ref = require('image-ref')

local M = {}

local NETWORK = '^cap[A-Za-z0-9_.%-]*$'
local PLUGIN = '^[A-Za-z0-9][A-Za-z0-9_.%-]*$'
M.MAX_PLUGIN_NAME = 128
local MIB = 1024 * 1024

-- The controller's own defaults (controller/spec/config.ts maxLimits, spec/limits.ts PIDS_LIMIT);
-- test/haproxy/ceilings.test.ts holds the two equal both ways.
M.DEFAULTS = { max_pids = 1024, max_memory_mb = 16384, max_cpus = 4 }

-- The entries of a comma list, each checked by `valid` (a description of what it must be on the
-- error), as a set.
local function list(name, text, valid, what)
  local set = {}
  if text == nil or text == '' then return set end
  for entry in (text .. ','):gmatch('([^,]*),') do
    if entry == '' then
      error(name .. ' has an empty entry (' .. string.format('%q', text) .. '): separate entries by single commas', 0)
    end
    if not valid(entry) then error(name .. ': ' .. string.format('%q', entry) .. ' is not ' .. what, 0) end
    set[entry] = true
  end
  return set
end

local function plugin_name(name)
  return #name <= M.MAX_PLUGIN_NAME and name:find(PLUGIN) ~= nil and not name:find('%.%.')
end

-- A listed image: a reference dockerd reads as a name (never an id prefix), from a registry that
-- could itself be listed.
local function listable_image(ref)
  local parsed = image_ref.parse(ref)
  return parsed ~= nil and not image_ref.reads_as_id(ref) and (parsed.domain == nil or image_ref.listable_registry(parsed.domain))
end

-- A positive whole number (or, with `fraction`, a decimal like 0.5), at most `max`.
local function number(name, text, default, max, fraction)
  if text == nil or text == '' then return default end
  local ok = text:find(fraction and '^%d+%.?%d*$' or '^%d+$') ~= nil and #text <= 12
  local n = ok and tonumber(text) or nil
  if n == nil or n <= 0 or n > max or (#text > 1 and text:find('^0%d')) then
    error(name .. ' must be a positive ' .. (fraction and 'number' or 'whole number') .. ' of at most ' .. max .. ', got ' .. string.format('%q', text), 0)
  end
  return n
end

-- The listed images with the spelling dockerd gives a name without tag or digest: "img" is
-- "img:latest" to it, so a listed "img" admits both. Never the other way: a bare name that is not
-- an image's name is searched for as an id prefix.
local function with_default_tags(images)
  local out = {}
  for ref in pairs(images) do
    out[ref] = true
    local parsed = image_ref.parse(ref)
    if parsed.tag == nil and parsed.digest == nil then out[ref .. ':latest'] = true end
  end
  return out
end

-- SOCKET_PROXY_BIND is set. It has no default: an address every interface listens on would let
-- anything on the proxy container's networks (every container on the default bridge, for a bare
-- `docker run`) make the controller's calls: exec as root in every sandbox, any workspace.
function M.require_bind(getenv)
  local bind = getenv('SOCKET_PROXY_BIND')
  if bind == nil or bind == '' then
    error('SOCKET_PROXY_BIND must be set: unix@/run/<dir>/docker.sock (what capybara-sandbox up uses), or address:port on a network only the controller is on (deploy/compose.yaml); there is no default, since whatever can reach the proxy holds the controller\'s whole power over the engine', 0)
  end
end

-- Every variable the socket proxy reads.
M.VARIABLES = {
  'SOCKET_PROXY_BIND', 'SOCKET_PROXY_SHARED_NETWORK', 'SOCKET_PROXY_VOLUME_DRIVERS', 'SOCKET_PROXY_IMAGES',
  'SOCKET_PROXY_REGISTRIES', 'SOCKET_PROXY_MAX_PIDS', 'SOCKET_PROXY_MAX_MEMORY', 'SOCKET_PROXY_MAX_CPUS', 'DOCKER_SOCKET',
}

-- The names of the process's environment (/proc/self/environ), or nil where it cannot be read.
function M.environment_names()
  local file = io.open('/proc/self/environ', 'rb')
  if file == nil then return nil end
  local text = file:read('a') or ''
  file:close()
  local names = {}
  for entry in text:gmatch('([^%z]+)') do names[#names + 1] = entry:match('^([^=]*)=') end
  return names
end

-- Edits (insert, delete, replace) from a to b, or most + 1 once past `most`.
local function edits_between(a, b, most)
  if math.abs(#a - #b) > most then return most + 1 end
  local row = {}
  for j = 0, #b do row[j] = j end
  for i = 1, #a do
    local next_row = { [0] = i }
    for j = 1, #b do
      local same = a:sub(i, i) == b:sub(j, j) and 0 or 1
      next_row[j] = math.min(row[j] + 1, next_row[j - 1] + 1, row[j - 1] + same)
    end
    row = next_row
  end
  return row[#b]
end

-- A variable of `names` that is not one the proxy reads but was surely meant as one: any other
-- SOCKET_PROXY_ name, or a slip of a name it reads (another case, an underscore or "-" more or
-- less, up to two letters wrong). Raises an error naming both. A misspelt SOCKET_PROXY_MAX_PIDS or
-- SOCKET_PROXY_IMAGES would otherwise leave the proxy on a default looser than the one set.
function M.refuse_misspelt(names)
  local known, squashed = {}, {}
  for _, name in ipairs(M.VARIABLES) do
    known[name] = true
    squashed[#squashed + 1] = { name = name, squash = name:upper():gsub('[_-]', '') }
  end
  for _, name in ipairs(names or {}) do
    if not known[name] then
      local squash = name:upper():gsub('[_-]', '')
      for _, k in ipairs(squashed) do
        if edits_between(squash, k.squash, 2) <= 2 then
          error(name .. ' is set, which the socket proxy does not read: did you mean ' .. k.name .. '? Its setting would be left at its default', 0)
        end
      end
      if squash:find('^SOCKETPROXY') then
        error(name .. ' is set, which the socket proxy does not read; it reads ' .. table.concat(M.VARIABLES, ', '), 0)
      end
    end
  end
end

function M.from_env(getenv)
  local shared = getenv('SOCKET_PROXY_SHARED_NETWORK')
  if shared == nil or not shared:find(NETWORK) then
    error('SOCKET_PROXY_SHARED_NETWORK must name the controller\'s shared network and start with cap (default capybara-sandbox)', 0)
  end
  local socket = getenv('DOCKER_SOCKET')
  if socket == nil or not socket:find('^/') then
    error('DOCKER_SOCKET must be the absolute path of the engine\'s socket (default /var/run/docker.sock)', 0)
  end
  local max_pids = number('SOCKET_PROXY_MAX_PIDS', getenv('SOCKET_PROXY_MAX_PIDS'), M.DEFAULTS.max_pids, 4194304)
  local max_memory_mb = number('SOCKET_PROXY_MAX_MEMORY', getenv('SOCKET_PROXY_MAX_MEMORY'), M.DEFAULTS.max_memory_mb, 16 * MIB)
  local max_cpus = number('SOCKET_PROXY_MAX_CPUS', getenv('SOCKET_PROXY_MAX_CPUS'), M.DEFAULTS.max_cpus, 1024, true)
  return {
    shared_network = shared,
    volume_drivers = list('SOCKET_PROXY_VOLUME_DRIVERS', getenv('SOCKET_PROXY_VOLUME_DRIVERS'), plugin_name,
      'a plugin name: letters, digits, "_", "." and "-" only (no "/" or "..": to dockerd a driver name is a socket path)'),
    images = with_default_tags(list('SOCKET_PROXY_IMAGES', getenv('SOCKET_PROXY_IMAGES'), listable_image,
      'an image reference dockerd reads as a name (lower-case, like capybara-sandbox:latest or registry.example.com/team/img:1), from a named registry (no IP literal, no localhost)')),
    registries = list('SOCKET_PROXY_REGISTRIES', getenv('SOCKET_PROXY_REGISTRIES'), image_ref.listable_registry,
      'a registry host name with at least one dot and an optional port (registry.example.com:5000); never an IP literal or localhost, which would let dockerd fetch from this host'),
    max_pids = max_pids,
    max_memory_bytes = max_memory_mb * MIB,
    -- tmpfs counts against the container's memory: the controller sizes /tmp at half of it.
    max_tmpfs_bytes = (max_memory_mb * MIB) // 2,
    max_nano_cpus = math.floor(max_cpus * 1e9 + 0.5),
    docker_socket = socket,
  }
end

return M
