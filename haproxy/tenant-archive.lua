-- The archives the socket proxy lets into an egress container (route tenant_register): a sandbox's
-- registration with a shared egress proxy, which dockerd writes as
-- /var/lib/capybara-egress/tenants/<slot>.json (the directory the egress watches, a volume). To
-- dockerd an archive is an instruction: it creates what each entry names, following what it finds,
-- as root (confined to the container's filesystem). So exactly what common/tenant-archive.ts
-- writes passes, and nothing else:
-- - one POSIX ustar header of a regular file, rebuilt here from the name, size and mtime read out
--   of it and compared byte for byte (mode 0644, uid and gid 0, no user or group name, typeflag
--   '0', magic "ustar\0" "00", no link name, no prefix, device numbers 0, the checksum): a
--   directory, a link, a GNU or PAX extension header, a second entry or a path with "/" cannot be
--   written in it;
-- - the name `<slot>.json`, slot ^[a-z0-9][a-z0-9_.-]{0,62}$;
-- - the content: a registration (policy/tenants.ts) or the vacant form, in compact JSON exactly as
--   JSON.stringify writes it (members in any order) and a newline: re-serialised here and compared,
--   so that no whitespace, escape or number spelling can make the egress's YAML reader see another
--   value than this check did; every member checked (below);
-- - zero padding to the block, exactly two zero blocks, nothing after.
-- The egress still checks everything itself (host names, path rules, subnet overlaps): this check
-- keeps what reaches it to the schema's shape. Pure: the standalone lua5.4 tests load it too.

local json = require('json-strict')

local M = {}

local BLOCK = 512
-- The egress's own limit on a registration file (proxy/tenants/slot-directory.ts MAX_FILE_BYTES);
-- the socket proxy's 32 KiB body cap keeps a content to 31,232 bytes before this is reached.
M.MAX_SIZE = 262144
M.MAX_HOSTS = 1000
M.MAX_PORTS = 64

local SLOT = '^[a-z0-9][a-z0-9_.%-]*$'
local SLOT_MAX = 63

local function deny(what)
  error({ reason = 'registration_invalid:' .. what }, 0)
end

local function octal(n, width)
  return string.format('%0' .. (width - 1) .. 'o', n) .. '\0'
end

-- The header common/tenant-archive.ts writes for this name, size and mtime.
function M.header(name, size, mtime)
  local h = table.concat({
    name .. ('\0'):rep(100 - #name),
    octal(420, 8), octal(0, 8), octal(0, 8), -- mode 0644, uid, gid
    octal(size, 12), octal(mtime, 12),
    (' '):rep(8), -- checksum, counted as blanks
    '0', -- a regular file
    ('\0'):rep(100), -- link name
    'ustar\0', '00',
    ('\0'):rep(32), ('\0'):rep(32), -- user and group names
    octal(0, 8), octal(0, 8), -- device numbers
    ('\0'):rep(155), -- prefix
  })
  h = h .. ('\0'):rep(BLOCK - #h)
  local sum = 0
  for i = 1, #h do sum = sum + h:byte(i) end
  return h:sub(1, 148) .. string.format('%06o', sum) .. '\0 ' .. h:sub(157)
end

-- Header fields, to name the first one that differs from what the encoder writes (the checksum
-- last: a changed field changes it too, and the field is what the refusal should name).
local FIELDS = {
  { 'name', 0, 100 }, { 'mode', 100, 8 }, { 'uid', 108, 8 }, { 'gid', 116, 8 }, { 'size', 124, 12 },
  { 'mtime', 136, 12 }, { 'typeflag', 156, 1 }, { 'linkname', 157, 100 },
  { 'magic', 257, 6 }, { 'version', 263, 2 }, { 'uname', 265, 32 }, { 'gname', 297, 32 },
  { 'devmajor', 329, 8 }, { 'devminor', 337, 8 }, { 'prefix', 345, 155 }, { 'padding', 500, 12 },
  { 'checksum', 148, 8 },
}

-- An octal field as the encoder writes it (digits, then one NUL), or nil.
local function read_octal(h, offset, width)
  local text = h:sub(offset + 1, offset + width)
  if not text:find('^[0-7]+%z$') or #text ~= width then return nil end
  return tonumber(text:sub(1, width - 1), 8)
end

local function check_header(h)
  local name = h:sub(1, 100):match('^([^%z]*)%z*$')
  if name == nil then deny('name') end
  local slot = name:match('^(.*)%.json$')
  if slot == nil or #slot > SLOT_MAX or not slot:find(SLOT) then deny('name') end
  local size = read_octal(h, 124, 12)
  if size == nil or size < 1 or size > M.MAX_SIZE then deny('size') end
  local mtime = read_octal(h, 136, 12)
  if mtime == nil then deny('mtime') end
  local want = M.header(name, size, mtime)
  if h ~= want then
    for _, f in ipairs(FIELDS) do
      if h:sub(f[2] + 1, f[2] + f[3]) ~= want:sub(f[2] + 1, f[2] + f[3]) then deny(f[1]) end
    end
    deny('header')
  end
  return size
end

-- The content's value, checked member by member. Paths name the member in the refusal.
local function is_object(v) return type(v) == 'table' and v.tag == 'object' end
local function is_array(v) return type(v) == 'table' and v.tag == 'array' end

local function members(v, where, spec)
  if not is_object(v) then deny(where) end
  local out = {}
  for i, key in ipairs(v.keys) do
    if out[key] ~= nil then deny(where .. '.' .. key) end -- given twice
    local test = spec[key]
    if test == nil then deny(where .. '.' .. key:gsub('[^A-Za-z0-9]', '?')) end
    test(v.vals[i], where .. '.' .. key)
    out[key] = v.vals[i]
  end
  return out
end

local function text(pattern, min, max)
  return function(v, where)
    if type(v) ~= 'string' or #v < min or #v > max or not v:find(pattern) then deny(where) end
  end
end

local function list(item, min, max)
  return function(v, where)
    if not is_array(v) or v.n < min or v.n > max then deny(where) end
    for i = 1, v.n do item(v[i], where) end
  end
end

local function one_of(...)
  local set = {}
  for _, x in ipairs({ ... }) do set[x] = true end
  return function(v, where)
    if type(v) ~= 'string' or not set[v] then deny(where) end
  end
end

local function version(v, where)
  if math.type(v) ~= 'integer' or v ~= 1 then deny(where) end
end

local function port(v, where)
  if math.type(v) ~= 'integer' or v < 1 or v > 65535 then deny(where) end
end

local host_name = text('^[a-z0-9.*%-]+$', 1, 253)

-- An allowHosts entry: a host name, or { host, tunnel, methods, paths } (no inspect, no secrets:
-- a shared egress holds no deployment CA and no sandbox's secrets).
local ENTRY = {
  host = host_name,
  tunnel = one_of('tls', 'opaque'),
  -- An RFC 9110 token in upper case (policy/request-rules.ts: methods are case-sensitive).
  methods = list(text("^[A-Z0-9!#$%%&'*+.^_`|~%-]+$", 1, 32), 1, 64),
  -- A path rule's characters (policy/request-path.ts), none of which JSON escapes.
  paths = list(text("^/[A-Za-z0-9._~!$&'()*+,;=:@/%%%-]*$", 1, 2048), 1, 256),
}

local function entry(v, where)
  if type(v) == 'string' then return host_name(v, where) end
  local out = members(v, where, ENTRY)
  if out.host == nil then deny(where .. '.host') end
end

local POLICY = {
  version = version,
  allowHosts = list(entry, 0, M.MAX_HOSTS),
  connectPorts = list(port, 1, M.MAX_PORTS),
  mode = one_of('enforce', 'report'),
}

local function policy(v, where)
  local out = members(v, where, POLICY)
  if out.allowHosts == nil then deny(where .. '.allowHosts') end
end

-- Dotted decimal without leading zeros: the number, or nil.
local function ipv4(s)
  if type(s) ~= 'string' then return nil end
  local a, b, c, d = s:match('^(%d+)%.(%d+)%.(%d+)%.(%d+)$')
  if a == nil then return nil end
  local n = 0
  for _, part in ipairs({ a, b, c, d }) do
    if #part > 3 or (#part > 1 and part:sub(1, 1) == '0') or tonumber(part) > 255 then return nil end
    n = n * 256 + tonumber(part)
  end
  return n
end

local REGISTRATION = {
  version = version,
  sandbox = text('^[A-Za-z0-9][A-Za-z0-9_.%-]*$', 1, 63),
  lifecycle = text('^[A-Za-z0-9%-]+$', 8, 64),
  subnet = function(v, where)
    if type(v) ~= 'string' then deny(where) end
    local base, bits = v:match('^([0-9.]+)/([1-9][0-9]?)$')
    local n, prefix = ipv4(base), tonumber(bits or '')
    if n == nil or prefix == nil or prefix < 16 or prefix > 30 or n % (1 << (32 - prefix)) ~= 0 then deny(where) end
  end,
  address = function(v, where)
    if ipv4(v) == nil then deny(where) end
  end,
  policy = policy,
  vacant = function(v, where)
    if v ~= true then deny(where) end
  end,
}

local function check_value(tree)
  local out = members(tree, 'content', REGISTRATION)
  if out.version == nil then deny('content.version') end
  if out.vacant ~= nil then
    if #tree.keys ~= 2 then deny('content.vacant') end
    return
  end
  for _, key in ipairs({ 'sandbox', 'lifecycle', 'subnet', 'address', 'policy' }) do
    if out[key] == nil then deny('content.' .. key) end
  end
  -- The address is a host address of the subnet: neither its network nor its broadcast address.
  local base, prefix = out.subnet:match('^(.+)/(%d+)$')
  local first, size, address = ipv4(base), 1 << (32 - tonumber(prefix)), ipv4(out.address)
  if address <= first or address >= first + size - 1 then deny('content.address') end
end

-- The value as JSON.stringify writes it: members in the order given, no whitespace. Every string
-- the schema admits is printable ASCII without '"' or '\', which JSON.stringify writes as is.
local function compact(v)
  if type(v) == 'string' then return '"' .. v .. '"' end
  if type(v) == 'boolean' then return tostring(v) end
  if math.type(v) == 'integer' then return string.format('%d', v) end
  if is_array(v) then
    local parts = {}
    for i = 1, v.n do parts[i] = compact(v[i]) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  if is_object(v) then
    local parts = {}
    for i, k in ipairs(v.keys) do parts[i] = '"' .. k .. '":' .. compact(v.vals[i]) end
    return '{' .. table.concat(parts, ',') .. '}'
  end
  deny('content')
end

local function check_content(content)
  if content:sub(-1) ~= '\n' then deny('content') end
  local tree, reason = json.parse(content, true)
  if tree == nil then deny('content.' .. reason:gsub(':.*', '')) end
  check_value(tree)
  if compact(tree) .. '\n' ~= content then deny('content.spelling') end
end

local function check_archive(body)
  if type(body) ~= 'string' or #body < 4 * BLOCK or #body % BLOCK ~= 0 then deny('length') end
  local size = check_header(body:sub(1, BLOCK))
  local blocks = (size + BLOCK - 1) // BLOCK
  if #body ~= (3 + blocks) * BLOCK then deny('length') end
  local rest = body:sub(BLOCK + size + 1)
  if rest:find('[^%z]') then deny('padding') end
  check_content(body:sub(BLOCK + 1, BLOCK + size))
end

-- nil when `body` is an archive common/tenant-archive.ts writes, else the deny reason
-- (registration_invalid:<what>, naming the header field, the length, the padding or the member).
function M.check(body)
  local ok, err = pcall(check_archive, body)
  if ok then return nil end
  if type(err) == 'table' and type(err.reason) == 'string' then return (err.reason:sub(1, 100):gsub('[^A-Za-z0-9_.:?%-]', '?')) end
  return 'body_check_failed'
end

return M
