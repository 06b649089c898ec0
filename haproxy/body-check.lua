-- The socket proxy's body decision: one parse (json-strict.lua), then the exact schema of the call
-- (docker-schema.lua). Pure: no HAProxy API, so the same file runs under a standalone lua5.4 in
-- the fuzz tests. check() returns nil when the body may pass, else the deny reason (the
-- X-Socket-Proxy-Deny value); anything unexpected inside is a refusal, never a pass.
--
-- What Docker's Go decoder does and this mirrors, member by member:
-- - a struct key matches a field case-insensitively (Go folds case), so within one struct two
--   keys that fold to the same word are a duplicate, whichever spelling wins for Go; a key that is
--   not exactly a field's name is not one this schema knows, and is refused;
-- - a map key is data, matched exactly: only an identical key is a duplicate;
-- - null, a number where a string belongs, a float where an integer belongs: refused, though Go
--   would skip a null or fail the request; nothing is left to a second reading.

local json = require('json-strict')
local schema = require('docker-schema')

local M = {}

-- Deny reason catalog: <code>[:<member>]. Codes the parser gives: body_not_json, body_not_object,
-- body_not_ascii, body_not_utf8, control_byte, key_not_ascii, too_deep:Body, too_broad:Body,
-- too_long:Key. Codes the schema gives (docker-schema.lua names its own required_* codes):
M.REASONS = {
  forbidden_key = 'forbidden_key',   -- a member the schema does not name
  duplicate_key = 'duplicate_key',   -- a member given twice (for a struct: in any letter case)
  bad_value = 'bad_value',           -- wrong type, or a value outside the member's set
  too_broad = 'too_broad',           -- more members or items than the member allows
  above_ceiling = 'limit_above_ceiling', -- a limit above the operator's ceiling (SOCKET_PROXY_MAX_*)
  unknown_route = 'body_not_allowed', -- no schema for this call (haproxy.cfg should not ask)
  check_failed = 'body_check_failed', -- the checker itself failed: refused
}

-- A member's name as it may appear in a header: anything but [A-Za-z0-9_.-] becomes "?".
local function label(text)
  return (text:sub(1, 64):gsub('[^A-Za-z0-9_.%-]', '?'))
end

local function deny(code, member)
  error({ reason = member and (code .. ':' .. label(member)) or code }, 0)
end

local function refuse(reason)
  error({ reason = reason }, 0)
end

local check_value

local function check_string(spec, v, name, settings)
  if type(v) ~= 'string' then deny(M.REASONS.bad_value, name) end
  local ok, reason
  if type(spec.test) == 'function' then ok, reason = spec.test(v, settings) else ok = v:find(spec.test) ~= nil end
  if not ok then
    if reason then refuse(reason) end
    if spec.bad then refuse(spec.bad) end
    deny(M.REASONS.bad_value, name)
  end
  return v
end

local function check_struct(spec, v, name, settings, deferred)
  if type(v) ~= 'table' or v.tag ~= 'object' then deny(M.REASONS.bad_value, name) end
  local by_key = {}
  for _, f in ipairs(spec.fields) do by_key[f[1]] = f end
  local seen, out = {}, {}
  for i, key in ipairs(v.keys) do
    local folded = key:lower()
    if seen[folded] then deny(M.REASONS.duplicate_key, spec.prefix .. (seen[folded])) end
    local field = by_key[key]
    if field == nil then deny(M.REASONS.forbidden_key, spec.prefix .. key) end
    seen[folded] = key
    out[key] = check_value(field[2], v.vals[i], spec.prefix .. key, settings, deferred)
  end
  -- What is missing, and what members say about each other, is judged once every member sent has
  -- been: a refusal names what is wrong in the body before what is absent from it.
  deferred[#deferred + 1] = function()
    for _, f in ipairs(spec.fields) do
      if f.required and out[f[1]] == nil then refuse(f.required) end
    end
    for _, rule in ipairs(spec.rules) do
      local reason = rule(out, settings)
      if reason then refuse(reason) end
    end
  end
  return out
end

local function check_map(spec, v, name, settings, deferred)
  if type(v) ~= 'table' or v.tag ~= 'object' then deny(M.REASONS.bad_value, name) end
  local map_name = spec.label or name
  if spec.max and #v.keys > spec.max then deny(M.REASONS.too_broad, map_name) end
  local out = {}
  for i, key in ipairs(v.keys) do
    if out[key] ~= nil then deny(M.REASONS.duplicate_key, map_name .. '.' .. key) end
    if spec.keys and not spec.keys[key] then deny(M.REASONS.forbidden_key, map_name .. '.' .. key) end
    local key_ok, key_reason = true, nil
    if spec.key then key_ok, key_reason = spec.key(key, settings) end
    if not key_ok then
      if key_reason then refuse(key_reason) end
      if spec.bad_key then refuse(spec.bad_key) end
      deny(M.REASONS.bad_value, map_name)
    end
    local value_spec = (spec.values and spec.values[key]) or spec.value
    out[key] = check_value(value_spec, v.vals[i], map_name, settings, deferred)
  end
  return out
end

local function check_list(spec, v, name, settings, deferred)
  if type(v) ~= 'table' or v.tag ~= 'array' then deny(M.REASONS.bad_value, name) end
  local out = {}
  for i = 1, v.n do out[i] = check_value(spec.item, v[i], name, settings, deferred) end
  -- Counted after the items, so that a wrong item is named as such (the parser bounds the work).
  if v.n < spec.min then deny(M.REASONS.bad_value, name) end
  if spec.max and v.n > spec.max then deny(M.REASONS.too_broad, name) end
  return out
end

check_value = function(spec, v, name, settings, deferred)
  local kind = spec.kind
  if kind == 'struct' then return check_struct(spec, v, name, settings, deferred)
  elseif kind == 'map' then return check_map(spec, v, name, settings, deferred)
  elseif kind == 'list' then return check_list(spec, v, name, settings, deferred)
  elseif kind == 'string' then return check_string(spec, v, name, settings)
  elseif kind == 'text' then
    if type(v) ~= 'string' then deny(M.REASONS.bad_value, name) end
    return v
  elseif kind == 'int' then
    if math.type(v) ~= 'integer' or (spec.min and v < spec.min) or (spec.max and v > spec.max) then
      deny(M.REASONS.bad_value, name)
    end
    if spec.ceiling and not (v <= settings[spec.ceiling]) then deny(M.REASONS.above_ceiling, name) end
    return v
  elseif kind == 'bool' then
    if type(v) ~= 'boolean' or (spec.only ~= nil and v ~= spec.only) then
      if spec.bad then refuse(spec.bad) end
      deny(M.REASONS.bad_value, name)
    end
    return v
  end
  refuse(M.REASONS.check_failed)
end

-- The body of `route` (a routes.map name) read as Docker will read it, or nil and the reason;
-- then the network ids it names (each still to be proven a sandbox network: network-proof.lua)
-- and the image of a container create with a volume (still to be proven to declare no volume of
-- its own: image-proof.lua).
-- settings: proxy-settings.lua's (shared network, volume drivers, images, registries, ceilings).
function M.parse_checked(route, body, settings)
  local spec = schema.routes[route]
  if spec == nil then return nil, M.REASONS.unknown_route end
  local tree, reason = json.parse(body, schema.plain_routes[route] == true)
  if tree == nil then return nil, reason end
  -- This call's own view of the settings: the schema records the network ids it meets here.
  local call = setmetatable({ network_ids = {} }, { __index = settings })
  local ok, err = pcall(function()
    local deferred = {}
    check_value(spec, tree, '', call, deferred)
    for _, judge in ipairs(deferred) do judge() end
  end)
  if ok then return tree, call.network_ids, call.image_to_prove end
  if type(err) == 'table' and type(err.reason) == 'string' then return nil, err.reason end
  error(err, 0)
end

-- nil when the body may pass (once the network ids in the second result and the image in the
-- third are proven), else the deny reason.
function M.check(route, body, settings)
  local ok, tree, extra, image = pcall(M.parse_checked, route, body, settings)
  if not ok then return M.REASONS.check_failed end
  if tree == nil then return extra end
  return nil, extra, image
end

return M
