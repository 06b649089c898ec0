-- HAProxy's side of the body check (haproxy.cfg loads this file): reads the settings once at
-- load (an invalid one stops HAProxy there), and registers the action `lua.check_body`, which sets
-- txn.body_verdict to "ok" or to the deny reason. haproxy.cfg sets that variable to
-- body_check_failed before calling the action: HAProxy continues with the next rule when a Lua
-- action errors, times out or runs out of memory, so only a check that ran to its end can pass.

local check = require('body-check')
local settings = require('proxy-settings').from_env(os.getenv)

core.register_action('check_body', { 'http-req' }, function(txn)
  local route = txn:get_var('txn.route')
  local reason = check.check(route, txn.f:req_body(), settings)
  txn:set_var('txn.body_verdict', reason or 'ok')
end, 0)
