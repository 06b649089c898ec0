-- The socket proxy's settings from its environment, checked once when HAProxy loads the Lua code:
-- a bad value raises an error there, and HAProxy refuses to start (never a proxy that guesses).
-- Pure (the environment comes in as a function), so the standalone lua5.4 tests read it too.
--
--   SOCKET_PROXY_SHARED_NETWORK   the one network not named "cap-..." callers may use; starts "cap"
--   SOCKET_PROXY_VOLUME_DRIVERS   comma list of volume plugin names allowed besides "local"; empty
--                                 or unset: none. To dockerd a driver name is a path (its plugin
--                                 socket is /run/docker/plugins/<name>.sock), so a name is a plain
--                                 word: no "/", no "..".
--   DOCKER_SOCKET                 the engine's socket (haproxy.cfg's backend too): where the
--                                 network proofs ask dockerd what an id names.

local M = {}

local NETWORK = '^cap[A-Za-z0-9_.%-]*$'
local PLUGIN = '^[A-Za-z0-9][A-Za-z0-9_.%-]*$'
M.MAX_PLUGIN_NAME = 128

local function volume_drivers(text)
  local set = {}
  if text == nil or text == '' then return set end
  for name in (text .. ','):gmatch('([^,]*),') do
    if name == '' then
      error('SOCKET_PROXY_VOLUME_DRIVERS has an empty name (' .. string.format('%q', text) .. '): list plugin names separated by single commas', 0)
    end
    if #name > M.MAX_PLUGIN_NAME or not name:find(PLUGIN) or name:find('%.%.') then
      error('SOCKET_PROXY_VOLUME_DRIVERS: ' .. string.format('%q', name) .. ' is not a plugin name: letters, digits, "_", "." and "-" only (no "/" or "..": to dockerd a driver name is a socket path)', 0)
    end
    set[name] = true
  end
  return set
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
  return { shared_network = shared, volume_drivers = volume_drivers(getenv('SOCKET_PROXY_VOLUME_DRIVERS')), docker_socket = socket }
end

return M
