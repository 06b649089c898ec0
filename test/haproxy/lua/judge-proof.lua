-- Test harness: runs haproxy/network-proof.lua (the file the proxy image loads) under a standalone
-- lua5.4 on dockerd answers given by the test.
--
-- Usage: lua5.4 judge-proof.lua <haproxy dir> <shared network>
-- stdin: frames "<id> <status> <byte count>\n<body bytes>"; stdout: one verdict per frame.
local dir = arg[1]
package.path = dir .. '/?.lua;' .. package.path
local proof = require('network-proof')
local settings = { shared_network = arg[2] }
while true do
  local head = io.read('l')
  if head == nil then break end
  local id, status, count = head:match('^(%S*) (%d+) (%d+)$')
  if id == nil then error('bad frame head: ' .. head) end
  local body = io.read(tonumber(count)) or ''
  local ok, verdict = pcall(proof.judge, id, tonumber(status), body, settings)
  io.write(ok and verdict or ('error ' .. tostring(verdict)), '\n')
end
