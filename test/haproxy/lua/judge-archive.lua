-- Test harness: runs haproxy/archive-proof.lua (the file the proxy image loads) under a standalone
-- lua5.4 on dockerd answers given by the test.
--
-- Usage: lua5.4 judge-archive.lua <haproxy dir>
-- stdin: frames "<container name> <route> <status> <byte count>\n<body bytes>"; stdout: one line
-- per frame, the verdict and, when it passed, the id the request is sent on to.
local dir = arg[1]
package.path = dir .. '/?.lua;' .. package.path
local archive = require('archive-proof')
-- The listed images (SOCKET_PROXY_IMAGES) the judge sees.
local settings = { images = { ['capybara-sandbox:latest'] = true, ['capybara-sandbox-egress:latest'] = true } }
while true do
  local head = io.read('l')
  if head == nil then break end
  local name, route, status, count = head:match('^(%S+) (%S+) (%d+) (%d+)$')
  if name == nil then error('bad frame head: ' .. head) end
  local body = io.read(tonumber(count)) or ''
  local ok, verdict, id = pcall(archive.judge, name, route, tonumber(status), body, settings)
  io.write(ok and (verdict .. (id and (' ' .. id) or '')) or ('error ' .. tostring(verdict)), '\n')
end
