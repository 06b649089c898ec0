-- Strict JSON parser for the socket proxy's request bodies (RFC 8259, nothing more), with caps.
--
-- Why not lua-cjson: it keeps the last of two equal keys and cannot say there were two, and Go
-- (dockerd) merges or overwrites on a duplicate, so the checker must see every member as sent.
-- Pure Lua, no HAProxy API: the same file runs under a standalone lua5.4 for the fuzz tests.
--
-- parse(text, plain, list) returns the value tree, or nil and a deny reason:
--   objects  { tag = 'object', keys = { k1, ... }, vals = { v1, ... } }  every member, in order,
--            duplicates included (body-check.lua decides what a duplicate is, per object kind);
--   arrays   { tag = 'array', n = count, [1] = v1, ... };
--   strings  Lua strings (decoded); numbers: a Lua integer when the text is an integer that fits
--            64 bits, else a float; true/false; json.NULL for null.
-- plain = true (container, volume and network bodies) refuses every byte outside printable ASCII
-- and every \u escape, so a value means exactly its bytes. Keys are plain ASCII in every body:
-- Go matches keys with Unicode case folding ("Bind\u017f" is Binds), which no byte test can follow.
-- Anything else odd (BOM, comments, trailing bytes, bare control bytes, NaN, leading zeros, lone
-- surrogates, overlong or invalid UTF-8) is refused, never repaired.

local M = {}

M.NULL = setmetatable({}, { __tostring = function() return 'null' end })

-- Caps: what one body may make the parser hold. The controller's largest body (a container create
-- with a long allowlist) nests 5 deep and has a few dozen members per object; an Env list is the
-- broadest thing it sends.
M.MAX_DEPTH = 10
M.MAX_MEMBERS = 1024   -- members of one object, or items of one array
M.MAX_KEY_BYTES = 256
M.MAX_NODES = 8192     -- values in the whole body

local byte, sub, find, char = string.byte, string.sub, string.find, string.char

local ESCAPES = { [34] = '"', [92] = '\\', [47] = '/', [98] = '\b', [102] = '\f', [110] = '\n', [114] = '\r', [116] = '\t' }

-- A failure travels as an error value (a table) so that deep recursion unwinds in one step; any
-- other error (a bug) is re-raised by parse() and becomes a refusal at the caller.
local function fail(reason)
  error({ reason = reason }, 0)
end

local function skip_ws(s, i)
  local c = byte(s, i)
  if c ~= 32 and c ~= 9 and c ~= 10 and c ~= 13 then return i end
  local _, e = find(s, '^[ \t\r\n]*', i)
  return e + 1
end

-- Length of the UTF-8 sequence starting at byte i, refusing overlongs, surrogates and > U+10FFFF.
local function utf8_len(s, i)
  local c = byte(s, i)
  local n, min
  if c >= 0xC2 and c <= 0xDF then n, min = 2, 0x80
  elseif c >= 0xE0 and c <= 0xEF then n, min = 3, 0x800
  elseif c >= 0xF0 and c <= 0xF4 then n, min = 4, 0x10000
  else fail('body_not_utf8') end
  local cp = c & (0x7F >> n)
  for k = 1, n - 1 do
    local cc = byte(s, i + k)
    if cc == nil or cc < 0x80 or cc > 0xBF then fail('body_not_utf8') end
    cp = (cp << 6) | (cc & 0x3F)
  end
  if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then fail('body_not_utf8') end
  return n
end

local function hex4(s, i)
  local h = sub(s, i, i + 3)
  if not find(h, '^%x%x%x%x$') then fail('body_not_json') end
  return tonumber(h, 16)
end

-- A string starting at the opening quote s[i]; returns the decoded string and the index after it.
-- `key` strings may hold only printable ASCII and the simple escapes.
local function read_string(s, i, plain, key)
  local j = i + 1
  -- Most strings hold no escape and no high byte: taken whole, without building parts.
  local q = find(s, '[\0-\31"\\\128-\255]', j)
  if q ~= nil and byte(s, q) == 34 then
    if key and q - j > M.MAX_KEY_BYTES then fail('too_long:Key') end
    return sub(s, j, q - 1), q + 1
  end
  local parts, np = {}, 0
  while true do
    -- The run of plain printable ASCII up to the next quote, backslash, control or high byte.
    local a = find(s, '[\0-\31"\\\128-\255]', j)
    if a == nil then fail('body_not_json') end
    if a > j then np = np + 1; parts[np] = sub(s, j, a - 1) end
    local c = byte(s, a)
    if c == 34 then
      local str = table.concat(parts)
      if key and #str > M.MAX_KEY_BYTES then fail('too_long:Key') end
      return str, a + 1
    elseif c == 92 then
      local e = byte(s, a + 1)
      local simple = e and ESCAPES[e]
      if simple then
        np = np + 1; parts[np] = simple
        j = a + 2
      elseif e == 117 then -- \uXXXX
        if key then fail('key_not_ascii') end
        if plain then fail('body_not_ascii') end
        local cp = hex4(s, a + 2)
        j = a + 6
        if cp >= 0xD800 and cp <= 0xDBFF then
          -- A high surrogate must be followed by an escaped low one (Go would put U+FFFD in place
          -- of a lone one: a value nobody meant).
          if sub(s, j, j + 1) ~= '\\u' then fail('body_not_utf8') end
          local lo = hex4(s, j + 2)
          if lo < 0xDC00 or lo > 0xDFFF then fail('body_not_utf8') end
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
          j = j + 6
        elseif cp >= 0xDC00 and cp <= 0xDFFF then
          fail('body_not_utf8')
        end
        np = np + 1; parts[np] = utf8.char(cp)
      else
        fail('body_not_json')
      end
    elseif c < 32 then
      fail('control_byte')
    else -- a byte >= 0x80
      if key then fail('key_not_ascii') end
      if plain then fail('body_not_ascii') end
      local n = utf8_len(s, a)
      np = np + 1; parts[np] = sub(s, a, a + n - 1)
      j = a + n
    end
  end
end

local function read_number(s, i)
  local a, e = find(s, '^%-?%d+', i)
  if a == nil then fail('body_not_json') end
  local int_part = sub(s, a, e)
  if find(int_part, '^%-?0%d') then fail('body_not_json') end -- leading zero
  local j = e + 1
  local is_int = true
  local fa, fe = find(s, '^%.%d+', j)
  if fa then is_int = false; j = fe + 1 elseif byte(s, j) == 46 then fail('body_not_json') end
  local xa, xe = find(s, '^[eE][-+]?%d+', j)
  if xa then is_int = false; j = xe + 1 elseif byte(s, j) == 101 or byte(s, j) == 69 then fail('body_not_json') end
  local text = sub(s, i, j - 1)
  local v = tonumber(text)
  if v == nil then fail('body_not_json') end
  -- An integer too large for 64 bits comes back as a float: the schema's integers refuse it, as
  -- Go refuses it for an int64 field.
  -- "-0" is an integer to Go's int64 and an error to its unsigned types: refused (as a float)
  -- wherever the schema wants an integer, so that no reader sees it.
  if is_int and not find(int_part, '^%-0$') then v = math.tointeger(v) or v + 0.0 else v = v + 0.0 end
  return v, j
end

local parse_value

local function count_node(st)
  st.nodes = st.nodes + 1
  if st.nodes > st.max_nodes then fail('too_broad:Body') end
end

local function parse_object(s, i, st, depth)
  local keys, vals, n = {}, {}, 0
  local j = skip_ws(s, i + 1)
  if byte(s, j) == 125 then return { tag = 'object', keys = keys, vals = vals }, j + 1 end
  while true do
    if byte(s, j) ~= 34 then fail('body_not_json') end
    local k
    k, j = read_string(s, j, true, true)
    j = skip_ws(s, j)
    if byte(s, j) ~= 58 then fail('body_not_json') end
    local v
    v, j = parse_value(s, skip_ws(s, j + 1), st, depth)
    n = n + 1
    if n > st.max_members then fail('too_broad:Body') end
    keys[n], vals[n] = k, v
    j = skip_ws(s, j)
    local c = byte(s, j)
    if c == 125 then return { tag = 'object', keys = keys, vals = vals }, j + 1 end
    if c ~= 44 then fail('body_not_json') end
    j = skip_ws(s, j + 1)
  end
end

local function parse_array(s, i, st, depth)
  local arr = { tag = 'array', n = 0 }
  local j = skip_ws(s, i + 1)
  if byte(s, j) == 93 then return arr, j + 1 end
  while true do
    local v
    v, j = parse_value(s, j, st, depth)
    arr.n = arr.n + 1
    if arr.n > st.max_members then fail('too_broad:Body') end
    arr[arr.n] = v
    j = skip_ws(s, j)
    local c = byte(s, j)
    if c == 93 then return arr, j + 1 end
    if c ~= 44 then fail('body_not_json') end
    j = skip_ws(s, j + 1)
  end
end

parse_value = function(s, i, st, depth)
  count_node(st)
  local c = byte(s, i)
  if c == 123 or c == 91 then
    if depth >= M.MAX_DEPTH then fail('too_deep:Body') end
    if c == 123 then return parse_object(s, i, st, depth + 1) end
    return parse_array(s, i, st, depth + 1)
  elseif c == 34 then
    return read_string(s, i, st.plain, false)
  elseif c == 45 or (c and c >= 48 and c <= 57) then
    return read_number(s, i)
  elseif sub(s, i, i + 3) == 'true' then
    return true, i + 4
  elseif sub(s, i, i + 4) == 'false' then
    return false, i + 5
  elseif sub(s, i, i + 3) == 'null' then
    return M.NULL, i + 4
  end
  fail('body_not_json')
end

-- The one member `key` of a parsed object: nil when absent, false when it is there twice (an
-- answer of dockerd's never has that: the proofs refuse it as unreadable).
function M.member(object, key)
  local value = nil
  for i, k in ipairs(object.keys) do
    if k == key then
      if value ~= nil then return false end
      value = object.vals[i]
    end
  end
  return value
end

-- Control bytes are never valid JSON, inside a string or out: refused up front, and named as such
-- wherever they sit (a NUL must never end what some later reader sees of the body).
local function has_control_byte(s)
  return find(s, '[\0-\8\11\12\14-\31\127]') ~= nil
end

-- list = true reads a JSON array instead of an object: dockerd's answer to a listing
-- (network-proof.lua), with the same caps and refusals. `broad` (a table with max_nodes and
-- max_members) raises the two breadth caps for an answer of dockerd's that is larger than any
-- body the controller sends: a container's inspect (archive-proof.lua) lists every network it is on.
function M.parse(text, plain, list, broad)
  if type(text) ~= 'string' then return nil, 'body_not_json' end
  if has_control_byte(text) then return nil, 'control_byte' end
  local i = skip_ws(text, 1)
  if byte(text, i) ~= (list and 91 or 123) then return nil, 'body_not_object' end
  local st = {
    nodes = 0, plain = plain and true or false,
    max_nodes = broad and broad.max_nodes or M.MAX_NODES, max_members = broad and broad.max_members or M.MAX_MEMBERS,
  }
  local ok, value, j = pcall(parse_value, text, i, st, 0)
  if not ok then
    if type(value) == 'table' and value.reason then return nil, value.reason end
    error(value, 0)
  end
  if skip_ws(text, j) <= #text then return nil, 'body_not_json' end -- trailing bytes
  return value
end

return M
