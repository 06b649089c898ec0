-- What of dockerd's answer to an image pull the socket proxy passes back. dockerd fetches from a
-- registry from the host's network, and when a registry (or whatever a registry's redirect names)
-- answers an error, dockerd copies that answer's body into its error message: the body of any
-- service dockerd can reach, read through the proxy. So no error text of a pull comes back:
--   - an answer that is not 200 (the pull failed before it streamed) is replaced in haproxy.cfg
--     by the same status and a fixed sentence;
--   - a 200 answer is a stream of JSON lines; this file passes a progress line as it is (members
--     dockerd writes itself: status, id, progress, progressDetail) and replaces every other line,
--     an error line above all, by one fixed error line, which the controller reads as a failure.
-- socket-proxy.lua runs it as an HAProxy filter, line by line. Pure: the standalone lua5.4 tests
-- load it too.

local json = require('json-strict')

local M = {}

-- A progress line is a few hundred bytes; a longer one is not dockerd's, and is cut off here.
M.MAX_LINE = 8192
M.SENTENCE = 'the image pull failed; the Docker socket proxy does not pass on what the registry answered (dockerd\'s log has it)'
M.FAILED_LINE = '{"errorDetail":{"message":"' .. M.SENTENCE .. '"},"error":"' .. M.SENTENCE .. '"}\r\n'

local PROGRESS_MEMBERS = { status = true, id = true, progress = true, progressDetail = true }

-- The line to send for one complete line of dockerd's (without its "\n").
function M.line(text)
  local body = text:gsub('\r$', '')
  if body == '' then return '' end
  local tree = #body <= M.MAX_LINE and json.parse(body, false) or nil
  if tree == nil then return M.FAILED_LINE end
  for _, key in ipairs(tree.keys) do
    if not PROGRESS_MEMBERS[key] then return M.FAILED_LINE end
  end
  return body .. '\r\n'
end

-- Feeds `data` (the next bytes of the stream) after `pending` (a line begun earlier): returns what
-- to send now and what to keep for the next call. A line that grows past MAX_LINE is answered
-- with the fixed error line at once and its rest dropped (`pending` is then false until its end).
function M.feed(pending, data)
  local out = {}
  local start = 1
  while true do
    local nl = data:find('\n', start, true)
    if nl == nil then break end
    local piece = data:sub(start, nl - 1)
    if pending == false then
      pending = ''
    else
      out[#out + 1] = M.line(pending .. piece)
      pending = ''
    end
    start = nl + 1
  end
  local rest = data:sub(start)
  if pending ~= false then
    pending = pending .. rest
    if #pending > M.MAX_LINE then
      out[#out + 1] = M.FAILED_LINE
      pending = false
    end
  end
  return table.concat(out), pending
end

return M
