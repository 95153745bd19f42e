-- Read the notes listed in one index set, with the Redis clock, in one round trip.
-- KEYS: 1 index set (a workspace set or a title index entry)
-- ARGV: 1 note key prefix (the tenant's '<base>:note:'), 2 limit
-- Note keys are derived here, not declared: they share the index's hash tag, so they live in the
-- same cluster slot. Reads only.
-- Returns {now_ms, id, title, workspace, version, created_ms, updated_ms, body, id, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {now}
local ids = redis.call('SMEMBERS', KEYS[1])
local limit = tonumber(ARGV[2])
local n = 0
for _, id in ipairs(ids) do
  if n >= limit then break end
  local f = redis.call('HMGET', ARGV[1] .. id, 'id', 'title', 'workspace', 'version',
    'created_ms', 'updated_ms', 'body')
  if f[1] then
    for i = 1, 7 do out[#out + 1] = f[i] end
    n = n + 1
  end
end
return out
