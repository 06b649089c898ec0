-- Image references as dockerd reads them, and whether the socket proxy lets one through. To dockerd
-- an image reference is an instruction: a pull makes it fetch from the registry the reference
-- names, from the host's own network namespace (127.0.0.0/8 is an insecure registry by default,
-- so "127.0.0.1:5000/x" is a plain HTTP GET of a host service), and a container create runs
-- whatever local image the reference resolves to, an image id prefix included. So a reference
-- passes only when it is one the operator listed (SOCKET_PROXY_IMAGES, exactly as written), or
-- comes from a registry the operator listed (SOCKET_PROXY_REGISTRIES) and cannot be read as an id.
-- Pure (no HAProxy API): the standalone lua5.4 tests and the fuzzer load it too.
--
-- The grammar is docker/distribution's reference grammar (vendored in Docker 20.10), narrowed
-- where readers disagree: lower-case registry names only, sha256 digests only.

local M = {}

M.DEFAULT_REGISTRY = 'docker.io'
-- Docker's old name for Docker Hub, which it reads as docker.io.
local LEGACY_REGISTRY = 'index.docker.io'
M.MAX_NAME = 255

-- separator: "." or "_" or "__" or any run of "-", between runs of [a-z0-9].
local function name_component(c)
  if not c:find('^[a-z0-9]') or not c:find('[a-z0-9]$') then return false end
  for sep in c:gmatch('[^a-z0-9]+') do
    if not (sep == '.' or sep == '_' or sep == '__' or sep:find('^%-+$')) then return false end
  end
  return true
end

-- A registry host (lower-case labels, a hyphen only inside one) and an optional decimal port.
local function registry_name(d)
  local host, port = d:match('^([^:]+):(%d+)$')
  if host == nil then host = d end
  if port ~= nil and (#port > 5 or port:sub(1, 1) == '0' or tonumber(port) > 65535) then return false end
  for label in (host .. '.'):gmatch('([^.]*)%.') do
    if not (label:find('^[a-z0-9]$') or label:find('^[a-z0-9][a-z0-9%-]*[a-z0-9]$')) then return false end
  end
  return true
end

-- The parts of `ref`, or nil: { domain = explicit registry or nil, path, tag, digest }.
function M.parse(ref)
  if type(ref) ~= 'string' or #ref == 0 or #ref > 512 or not ref:find('^[%w_.:/@%-]+$') then return nil end
  local rest, digest = ref, nil
  local at = ref:find('@', 1, true)
  if at ~= nil then
    rest, digest = ref:sub(1, at - 1), ref:sub(at + 1)
    if not digest:find('^sha256:' .. string.rep('[0-9a-f]', 64) .. '$') then return nil end
  end
  -- A tag is what follows the last ":" that comes after the last "/" (a ":" before it is a port).
  local tag = nil
  local last_slash = rest:match('.*()/') or 0
  local colon = rest:find(':[^:/]*$')
  if colon ~= nil and colon > last_slash then
    rest, tag = rest:sub(1, colon - 1), rest:sub(colon + 1)
    if #tag > 128 or not tag:find('^[%w_][%w_.%-]*$') then return nil end
  end
  -- docker/distribution's rule: the first component names a registry when it holds "." or ":" or
  -- is "localhost"; anything else is a path on Docker Hub.
  local domain, path = nil, rest
  local first, remainder = rest:match('^([^/]+)/(.+)$')
  if first ~= nil and (first:find('[.:]') or first == 'localhost') then
    if not registry_name(first) then return nil end
    domain, path = first, remainder
  end
  if #rest > M.MAX_NAME then return nil end
  for component in (path .. '/'):gmatch('([^/]*)/') do
    if not name_component(component) then return nil end
  end
  return { domain = domain, path = path, tag = tag, digest = digest }
end

-- True when dockerd could read `ref` as an image id rather than a name: a container create
-- looks a name up, and when that fails, searches the image ids for the text as a prefix
-- ("2c7b847d", "sha256:2c7b"), which would run any local image.
function M.reads_as_id(ref)
  return ref:find('^[0-9a-f]+$') ~= nil or ref:find('^sha%d+:[0-9a-f]*$') ~= nil
end

-- The registry dockerd fetches `parsed` from.
function M.registry(parsed)
  local d = parsed.domain or M.DEFAULT_REGISTRY
  if d == LEGACY_REGISTRY then return M.DEFAULT_REGISTRY end
  return d
end

-- A registry an operator may list: a name, never an address or this host. "localhost" and its
-- subdomains are this host; a last label of digits, or of hex after 0x, is an IP literal in
-- some spelling (10.0.0.1, 2130706433, 0x7f.1); a name without a dot is left to the host's
-- resolver search list, which can make it anything.
function M.listable_registry(d)
  if not registry_name(d) then return false end
  local host = d:match('^([^:]+)') or d
  local last = host:match('([^.]*)$')
  if host == 'localhost' or host:find('%.localhost$') then return false end
  if last:find('^%d+$') or last:find('^0x[0-9a-f]*$') then return false end
  return host:find('.', 1, true) ~= nil
end

-- nil when `ref` may be created from or pulled, else the deny reason.
function M.judge(ref, settings)
  if type(ref) ~= 'string' then return 'image_not_allowed' end
  if settings.images[ref] then return nil end
  if M.reads_as_id(ref) then return 'image_not_allowed' end
  local parsed = M.parse(ref)
  if parsed == nil then return 'image_not_allowed' end
  local registry = M.registry(parsed)
  if settings.registries[registry] then return nil end
  -- Only a registry the reference names itself is worth naming back: the name was checked above
  -- (lower-case labels, digits and one port), so it is safe in a header.
  if parsed.domain ~= nil then return 'registry_not_allowed:' .. parsed.domain end
  return 'image_not_allowed'
end

-- nil when `ref` may be pulled, else the deny reason: as judge, and with a tag or a digest (a pull
-- of a bare name fetches every tag of it).
function M.judge_pull(ref, settings)
  local parsed = M.parse(ref)
  if parsed ~= nil and not M.reads_as_id(ref) and parsed.tag == nil and parsed.digest == nil then return 'image_tag_required' end
  return M.judge(ref, settings)
end

-- The reference an image inspect path names ("/images/<ref>/json", API version prefix removed),
-- or nil. haproxy.cfg's route admits no "%" there, so the path is the reference as written.
function M.inspect_reference(path)
  if type(path) ~= 'string' then return nil end
  return path:match('^/images/(.+)/json$')
end

-- nil when the image a request names may be used, else the deny reason: a pull's (route
-- image_pull) one fromImage in `query`, or an inspect's reference in `path`.
function M.check_request(route, query, path, settings)
  if route == 'image_pull' then
    local ref = M.query_value(query, 'fromImage')
    return ref == nil and 'image_not_allowed' or M.judge_pull(ref, settings)
  end
  local ref = M.inspect_reference(path)
  return ref == nil and 'image_not_allowed' or M.judge(ref, settings)
end

-- The value of a query parameter as Go's url.ParseQuery decodes it ("%2F" is "/"), or nil when
-- it is not exactly `name=<value>` with well-formed escapes. haproxy.cfg's route admits no "+",
-- "&" or ";" there, so this is the one value dockerd reads.
function M.query_value(query, name)
  if type(query) ~= 'string' then return nil end
  local value = query:match('^' .. name .. '=(.*)$')
  if value == nil or value:find('[&;+]') then return nil end
  if value:find('%%[^%x]') or value:find('%%%x[^%x]') or value:find('%%%x?$') then return nil end
  return (value:gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end

return M
