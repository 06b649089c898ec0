-- Test harness: runs haproxy/body-check.lua (the very file the proxy image loads) under a
-- standalone lua5.4, for the unit tests and the fuzzer. Settings come from the environment, read
-- by haproxy/proxy-settings.lua as HAProxy reads them.
--
-- Usage: lua5.4 check-bodies.lua <haproxy dir>
-- stdin: frames "<route> <byte count>\n<body bytes>"; stdout, one line per frame (route
-- container_archive and tenant_register: the archive's verdict, as socket-proxy.lua gives it; routes image_pull and
-- image_inspect: the body is a pull's query string or an inspect's path, judged as
-- socket-proxy.lua's check_image judges them):
--   "deny <reason>"  or  "ok <json>": the body as the checker read it (members in order, strings
--   re-encoded with \u escapes for everything outside printable ASCII), for the Go differential,
--   then, when the body names networks by id (which the proxy proves before the request goes on),
--   a tab and those ids, comma-separated.
-- With the single argument "schema" after the directory, prints the schema's member paths instead.
local dir = arg[1]
package.path = dir .. '/?.lua;' .. package.path
local json = require('json-strict')
local check = require('body-check')
local schema = require('docker-schema')
local owner = require('workspace-owner')
local tenant = require('tenant-archive')
local image_ref = require('image-ref')

local function encode_string(s)
  local out = s:gsub('[%c"\\\128-\255]', function(c) return string.format('\\u%04x', c:byte()) end)
  return '"' .. out .. '"'
end

-- Non-ASCII is written as its UTF-8 bytes decoded to code points (the harness side never sees
-- invalid UTF-8: the parser refused it).
local function encode_text(s)
  local parts = {}
  for _, cp in utf8.codes(s) do
    if cp >= 0x20 and cp < 0x7f and cp ~= 34 and cp ~= 92 then
      parts[#parts + 1] = string.char(cp)
    elseif cp < 0x10000 then
      parts[#parts + 1] = string.format('\\u%04x', cp)
    else
      local v = cp - 0x10000
      parts[#parts + 1] = string.format('\\u%04x\\u%04x', 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF))
    end
  end
  return '"' .. table.concat(parts) .. '"'
end

local function encode(v)
  local t = type(v)
  if t == 'string' then return encode_text(v)
  elseif t == 'boolean' then return tostring(v)
  elseif t == 'number' then
    if math.type(v) == 'integer' then return string.format('%d', v) end
    return string.format('%.17g', v)
  elseif v == json.NULL then return 'null'
  elseif v.tag == 'array' then
    local parts = {}
    for i = 1, v.n do parts[i] = encode(v[i]) end
    return '[' .. table.concat(parts, ',') .. ']'
  else
    local parts = {}
    for i, k in ipairs(v.keys) do parts[i] = encode_string(k) .. ':' .. encode(v.vals[i]) end
    return '{' .. table.concat(parts, ',') .. '}'
  end
end

local function schema_paths(spec, path, out)
  if spec.kind == 'struct' then
    for _, f in ipairs(spec.fields) do
      local p = path == '' and f[1] or (path .. '.' .. f[1])
      out[#out + 1] = p
      schema_paths(f[2], p, out)
    end
  elseif spec.kind == 'map' then
    if spec.keys then
      for k in pairs(spec.keys) do out[#out + 1] = path .. '.' .. k end
    else
      out[#out + 1] = path .. '.*'
      schema_paths(spec.value, path .. '.*', out)
    end
  elseif spec.kind == 'list' then
    schema_paths(spec.item, path .. '[]', out)
  end
  return out
end

if arg[2] == 'schema' then
  for route, spec in pairs(schema.routes) do
    for _, p in ipairs(schema_paths(spec, '', {})) do io.write(route, ' ', p, '\n') end
  end
  return
end

require('proxy-settings').refuse_misspelt(require('proxy-settings').environment_names())
local settings = require('proxy-settings').from_env(os.getenv)
io.stdout:setvbuf('full')
while true do
  local head = io.read('l')
  if head == nil then break end
  local route, count = head:match('^(%S+) (%d+)$')
  if route == nil then error('bad frame head: ' .. head) end
  local body = io.read(tonumber(count)) or ''
  if route == 'container_archive' or route == 'tenant_register' or route == 'image_pull' or route == 'image_inspect' then
    local reason
    if route == 'container_archive' then
      reason = owner.check(body)
    elseif route == 'tenant_register' then
      reason = tenant.check(body)
    else
      reason = image_ref.check_request(route, body, body, settings)
    end
    io.write(reason and ('deny ' .. reason) or 'ok {}', '\n')
  else
    local ok, tree, extra = pcall(check.parse_checked, route, body, settings)
    if not ok then
      io.write('deny ', check.REASONS.check_failed, '\n')
    elseif tree == nil then
      io.write('deny ', extra, '\n')
    elseif #extra > 0 then
      io.write('ok ', encode(tree), '\t', table.concat(extra, ','), '\n')
    else
      io.write('ok ', encode(tree), '\n')
    end
  end
  io.stdout:flush()
end
