-- The benchmark's light HTTP client (cluster/bench/wrk.py): notes_delete flows,
-- round 1 then round 2, over one keep-alive HTTP/1.1 connection per wrk thread (-tN -cN).
--   wrk -tN -cN -dS -s wrk_flow.lua URL -- TARGETS_FILE N
-- TARGETS_FILE: one flow per line, token|workspaceUri|title|noteId (thread i takes lines i, i+N..).
-- Round 1 must offer the line's note; round 2 must answer deleted:true; anything else counts as
-- a failure. A thread stops when its lines run out. done() prints FLOWS n FAILURES m.
local threads, counter = {}, 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end
local META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},'
  .. '"io.modelcontextprotocol/clientInfo":{"name":"wrk-flow","version":"0.1"}}'
function init(args)
  local nthreads = tonumber(args[2])
  targets, idx, rid = {}, 0, 0
  local i = 0
  for line in io.lines(args[1]) do
    if i % nthreads == tid then table.insert(targets, line) end
    i = i + 1
  end
  pending, cur, flows, failures = nil, nil, 0, 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
  wrk.headers["Mcp-Method"] = "tools/call"
  wrk.headers["Mcp-Name"] = "notes_delete"
end
local function call(extra)
  rid = rid + 1
  local args = '{"workspaceUri":"' .. cur.ws .. '","title":"' .. cur.title .. '"}'
  local body = '{"jsonrpc":"2.0","id":' .. rid .. ',"method":"tools/call","params":{"name":"notes_delete","arguments":'
    .. args .. extra .. ',' .. META .. '}}'
  wrk.headers["Authorization"] = "Bearer " .. cur.token
  return wrk.format(nil, nil, nil, body)
end
function request()
  if pending == nil then
    idx = idx + 1
    local line = targets[idx] or targets[#targets]
    local token, ws, title, note = line:match("([^|]*)|([^|]*)|([^|]*)|([^|]*)")
    cur = {token = token, ws = ws, title = title, note = note, round = 1}
    return call("")
  end
  cur.round = 2
  local state = pending
  pending = nil
  return call(',"inputResponses":{"confirm_delete":{"action":"accept","content":{"noteId":"'
    .. cur.note .. '","confirm":true}}},"requestState":"' .. state .. '"')
end
function response(status, headers, body)
  if cur.round == 1 then
    local state = body:match('"requestState":"([^"]*)"')
    local picked = body:match('"const":"([^"]*)"')
    if state and picked == cur.note then pending = state else failures = failures + 1 end
  elseif body:find('"deleted":true', 1, true) then
    flows = flows + 1
  else
    failures = failures + 1
  end
  if idx >= #targets and pending == nil then wrk.thread:stop() end
end
function done(summary, latency, requests)
  local f, bad = 0, 0
  for _, t in ipairs(threads) do
    f = f + t:get("flows")
    bad = bad + t:get("failures")
  end
  io.write(string.format("FLOWS %d FAILURES %d\n", f, bad))
end
