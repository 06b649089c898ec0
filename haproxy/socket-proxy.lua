-- HAProxy's side of the body check and of the network proofs (haproxy.cfg loads this file): reads
-- the settings once at load (an invalid one stops HAProxy there), and registers two actions.
--   lua.check_body      sets txn.body_verdict to "ok" or to the deny reason, and txn.body_net_ids
--                       to the network ids the body names (comma-separated), which must be proven;
--   lua.prove_networks  asks dockerd (over DOCKER_SOCKET) what each network id of the request
--                       names (the path's, txn.net, and the body's) and sets txn.proof_verdict to
--                       "ok" or the reason (network-proof.lua judges the answers).
-- haproxy.cfg sets each verdict to a refusal before calling its action: HAProxy continues with the
-- next rule when a Lua action errors, times out or runs out of memory, so only an action that ran
-- to its end can pass a request.

local check = require('body-check')
local proof = require('network-proof')
local settings = require('proxy-settings').from_env(os.getenv)

-- Deadline of one question to dockerd: it answers a listing in milliseconds.
local PROOF_TIMEOUT_MS = 5000

core.register_action('check_body', { 'http-req' }, function(txn)
  local route = txn:get_var('txn.route')
  local reason, ids = check.check(route, txn.f:req_body(), settings)
  if reason == nil and ids ~= nil and #ids > 0 then txn:set_var('txn.body_net_ids', table.concat(ids, ',')) end
  txn:set_var('txn.body_verdict', reason or 'ok')
end, 0)

core.register_action('prove_networks', { 'http-req' }, function(txn)
  local ids = {}
  local path_net = txn:get_var('txn.net')
  if proof.is_id(path_net) then ids[#ids + 1] = path_net end
  for id in (txn:get_var('txn.body_net_ids') or ''):gmatch('[^,]+') do ids[#ids + 1] = id end
  for _, id in ipairs(ids) do
    local answer = core.httpclient():get({
      url = 'http://docker' .. proof.path(id), dst = 'unix@' .. settings.docker_socket, timeout = PROOF_TIMEOUT_MS,
    })
    local verdict = proof.judge(id, answer and answer.status, answer and answer.body, settings)
    if verdict ~= proof.OK then
      txn:set_var('txn.proof_missing', id)
      txn:set_var('txn.proof_verdict', verdict)
      return
    end
  end
  txn:set_var('txn.proof_verdict', proof.OK)
end, 0)
