-- HAProxy's side of the body check, the image check, the network and archive proofs and the pull answer
-- (haproxy.cfg loads this file): reads the settings once at load (an invalid one stops HAProxy
-- there), and registers five actions and a filter.
--   lua.check_body      sets txn.body_verdict to "ok" or to the deny reason, txn.body_net_ids
--                       to the network ids the body names (comma-separated), which must be proven,
--                       and txn.body_image to the image of a container create with a volume;
--                       an archive (route container_archive) must be workspace-owner.lua's,
--                       a registration (route tenant_register) one tenant-archive.lua admits;
--   lua.check_image     sets txn.image_verdict to "ok" or the reason for the image a pull names
--                       (its one fromImage, decoded as dockerd decodes it, with a tag or digest)
--                       or an inspect names (its path): image-ref.lua;
--   lua.prove_networks  asks dockerd (over DOCKER_SOCKET) what each network id of the request
--                       names (the path's, txn.net, and the body's) and sets txn.proof_verdict to
--                       "ok" or the reason (network-proof.lua judges the answers);
--   lua.prove_image     asks dockerd for txn.body_image and sets txn.image_proof_verdict to "ok"
--                       (it declares no volume of its own) or the reason (image-proof.lua);
--   lua.prove_archive   asks dockerd for the container an archive is put into and sets
--                       txn.archive_verdict to "ok" or the reason (archive-proof.lua judges the
--                       answer, a registration's container by its image too); with "ok", the
--                       request's path names the container by that id;
--   filter pull-answer  on a pull's 200 stream, passes progress lines and replaces every other
--                       line by a fixed error line (pull-answer.lua).
-- haproxy.cfg sets each verdict to a refusal before calling its action: HAProxy continues with the
-- next rule when a Lua action errors, times out or runs out of memory, so only an action that ran
-- to its end can pass a request. A filter that errors aborts its stream: nothing more is sent.

local check = require('body-check')
local proof = require('network-proof')
local archive = require('archive-proof')
local image_proof = require('image-proof')
local image_ref = require('image-ref')
local owner = require('workspace-owner')
local tenant = require('tenant-archive')
local pull_answer = require('pull-answer')
local proxy_settings = require('proxy-settings')
proxy_settings.refuse_misspelt(proxy_settings.environment_names())
proxy_settings.require_bind(os.getenv)
local settings = proxy_settings.from_env(os.getenv)

-- Deadline of one question to dockerd: it answers a listing in milliseconds. HAProxy's httpclient
-- takes it as a server timeout, an idle one: an answer that kept moving could outlast it, which
-- dockerd's answers to the proofs' questions (one object's inspect) never do.
local PROOF_TIMEOUT_MS = 5000

core.register_action('check_body', { 'http-req' }, function(txn)
  local route = txn:get_var('txn.route')
  if route == 'container_archive' then
    txn:set_var('txn.body_verdict', owner.check(txn.f:req_body()) or 'ok')
    return
  end
  if route == 'tenant_register' then
    txn:set_var('txn.body_verdict', tenant.check(txn.f:req_body()) or 'ok')
    return
  end
  local reason, ids, image = check.check(route, txn.f:req_body(), settings)
  if reason == nil and ids ~= nil and #ids > 0 then txn:set_var('txn.body_net_ids', table.concat(ids, ',')) end
  if reason == nil and image ~= nil then txn:set_var('txn.body_image', image) end
  txn:set_var('txn.body_verdict', reason or 'ok')
end, 0)

core.register_action('check_image', { 'http-req' }, function(txn)
  local reason = image_ref.check_request(txn:get_var('txn.route'), txn.f:query(), txn:get_var('txn.upath'), settings)
  txn:set_var('txn.image_verdict', reason or 'ok')
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

core.register_action('prove_image', { 'http-req' }, function(txn)
  local ref = txn:get_var('txn.body_image')
  local answer = core.httpclient():get({
    url = 'http://docker' .. image_proof.path(ref), dst = 'unix@' .. settings.docker_socket, timeout = PROOF_TIMEOUT_MS,
  })
  local verdict = image_proof.judge(answer and answer.status, answer and answer.body)
  if verdict ~= image_proof.OK then txn:set_var('txn.proof_missing', ref) end
  txn:set_var('txn.image_proof_verdict', verdict)
end, 0)

core.register_action('prove_archive', { 'http-req' }, function(txn)
  local route = txn:get_var('txn.route')
  local name = (txn:get_var('txn.upath') or ''):match('^/containers/([^/]+)/archive$')
  if name == nil then return end
  local answer = core.httpclient():get({
    url = 'http://docker' .. archive.path(name), dst = 'unix@' .. settings.docker_socket, timeout = PROOF_TIMEOUT_MS,
  })
  local verdict, id = archive.judge(name, route, answer and answer.status, answer and answer.body, settings)
  if verdict == archive.OK then
    -- The container judged, by its id: not whichever holds the name by the time dockerd reads it.
    -- A rewrite that fails (it says so, it does not raise) leaves the verdict a refusal.
    local version = txn.sf:path():match('^(/v1%.[0-9]+)/') or ''
    if not txn.http:req_set_path(version .. '/containers/' .. id .. '/archive') then return end
  else
    txn:set_var('txn.proof_missing', name)
  end
  txn:set_var('txn.archive_verdict', verdict)
end, 0)

-- A pull's answer, line by line. Registered on every response of the frontend, it takes the data
-- of a pull's only (txn.route is set before any response exists).
local PullFilter = { id = 'pull-answer', flags = filter.FLT_CFG_FL_HTX }
PullFilter.__index = PullFilter

function PullFilter:new()
  return setmetatable({ pending = '' }, PullFilter)
end

-- HAProxy skips a filter whose Lua context it cannot make for a stream (Lua's memory is full, which
-- a caller can bring about with bodies of its own): that stream's answer would go out unfiltered.
-- So the filter says it is there, and haproxy.cfg withholds a pull's 200 answer without it.
function PullFilter:start_analyze(txn, chn)
  if chn:is_resp() and txn:get_var('txn.route') == 'image_pull' then
    filter.register_data_filter(self, chn)
    txn:set_var('txn.pull_filtered', true)
  end
end

-- What it returns is how much of the input goes on: all of it, its data replaced by the filtered
-- lines. The input is more than the data (msg:body()) when the message ends: the end of a chunked
-- body (dockerd streams a pull chunked) is a block of its own, and one never forwarded holds the
-- answer open forever, even after dockerd has closed.
function PullFilter:http_payload(txn, msg)
  local data = msg:body() or ''
  local out
  out, self.pending = pull_answer.feed(self.pending, data)
  if #data > 0 then msg:set(out, 0, #data) end
  return msg:input()
end

core.register_filter('pull_answer', PullFilter, function(f) return f end)
