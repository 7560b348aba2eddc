-- Loaded by HAProxy (haproxy-config.ts): may this request for a blob's bytes go straight to the
-- upstream registry? Node's registry front answers, by its own rules (registry/front.ts,
-- mayBypass); HAProxy only carries the answer out, for this one request.
--
-- Only a 204 lets the request by. Anything else leaves it to the front, which answers it itself
-- (its 401/404 with their bodies): with the verdict it gave here when the answer names one
-- (x-svc-verdict, REGISTRY_VERDICT_HEADER in haproxy-config.ts, which drops a client's own), else
-- deciding again, so a failure here can cost speed, never let a request through. Nothing is
-- logged: credentials travel in the Authorization header, upload state in the URL.
core.register_action('svc_registry_bypass', { 'http-req' }, function(txn, front)
  local headers = {
    ['x-svc-method'] = { txn.sf:method() },
    -- the target exactly as HAProxy forwards it
    ['x-svc-url'] = { txn.sf:url() },
  }
  local authorization = txn.sf:req_fhdr('authorization')
  if authorization ~= nil and authorization ~= '' then headers['authorization'] = { authorization } end
  local ok, answer = pcall(function()
    return core.httpclient():get({ url = 'http://registry-front/', headers = headers, dst = front, timeout = 5000 })
  end)
  if not ok or answer == nil then return end
  if answer.status == 204 then return txn:set_var('txn.registry_bypass', true) end
  local verdict = answer.headers and answer.headers['x-svc-verdict']
  if verdict ~= nil then txn.http:req_set_header('x-svc-verdict', verdict[0] or verdict[1]) end
end, 1)
