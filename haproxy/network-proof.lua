-- Proof that a network id names a sandbox network. The controller addresses its networks by id
-- once it has made them (Docker's CheckDuplicate races across processes, and a name several
-- networks share can no longer be used), but an id can address ANY network on the host: the
-- operator's own, host-facing ones. So before a request that names a network by id goes on,
-- socket-proxy.lua asks dockerd for the network with that id, and this file judges the answer:
-- the request passes only when exactly that network exists and its name is one a name would be
-- allowed under ("cap-..." or exactly the shared network). Any other answer refuses. Pure (no
-- HAProxy API), so the standalone lua5.4 tests judge answers too.

local json = require('json-strict')

local M = {}

-- Verdicts (txn.proof_verdict; the refusals become the X-Socket-Proxy-Deny reason).
M.OK = 'ok'
M.NOT_FOUND = 'network_not_found'       -- answered 404, the way dockerd answers a missing network
M.NOT_ALLOWED = 'network_not_allowed'   -- the id names a network that is not a sandbox network
M.FAILED = 'network_proof_failed'       -- dockerd did not answer as expected: refused

-- A full id only: a prefix could match another network than the one proven.
function M.is_id(v)
  return type(v) == 'string' and #v == 64 and v:find('^[0-9a-f]+$') ~= nil
end

-- The request that asks for it: a listing filtered on the id (a listing leaves out the members,
-- so the answer stays small however many containers a network has). Docker matches the id filter
-- as a substring; the judge below wants the exact id.
function M.path(id)
  return '/networks?filters=%7B%22id%22%3A%5B%22' .. id .. '%22%5D%7D'
end

local member = json.member

local function allowed_name(name, settings)
  return type(name) == 'string'
    and (name:find('^cap%-[A-Za-z0-9][A-Za-z0-9_.%-]*$') ~= nil or name == settings.shared_network)
end

-- The verdict on dockerd's answer (status, body) to M.path(id).
function M.judge(id, status, body, settings)
  if not M.is_id(id) or status ~= 200 or type(body) ~= 'string' then return M.FAILED end
  local list = json.parse(body, false, true)
  if list == nil then return M.FAILED end
  local found = nil
  for i = 1, list.n do
    local n = list[i]
    if type(n) ~= 'table' or n.tag ~= 'object' then return M.FAILED end
    local nid = member(n, 'Id')
    if nid == false then return M.FAILED end
    if nid == id then
      if found ~= nil then return M.FAILED end
      found = n
    end
  end
  if found == nil then return M.NOT_FOUND end
  local name = member(found, 'Name')
  if name == false then return M.FAILED end
  if allowed_name(name, settings) then return M.OK end
  return M.NOT_ALLOWED
end

return M
