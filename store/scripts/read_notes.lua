-- Read one page of the notes listed in one index set, with the Redis clock, in one round trip.
-- KEYS: 1 index set (a workspace set or a title index entry)
-- ARGV: 1 note key prefix (the tenant's '<base>:note:')  2 page size
--       3 position: only ids after this one are read ('' = from the start)
-- Pages run in note id order, so a page boundary is a plain id: a listing across pages never
-- shows a note twice, and misses none that stayed in the set throughout. The ids are sorted here
-- (the set is bounded by the per-workspace limit); only the page's own notes are read, and no
-- bodies: a listing shows none. Note keys are derived here, not declared: they share the index's
-- hash tag, so they live in the same cluster slot. Reads only.
-- Returns {now_ms, next position ('' when the set ends within this page),
--          id, title, workspace, version, created_ms, updated_ms, id, ...}.
-- An indexed id whose note is gone (deleted meanwhile) takes its place in the page, unshown.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('SMEMBERS', KEYS[1])
table.sort(ids)
local limit = tonumber(ARGV[2])
local after = ARGV[3] or ''
local out = {now, ''}
local n = 0
local last = ''
for _, id in ipairs(ids) do
  if id > after then
    if n >= limit then
      out[2] = last
      return out
    end
    local f = redis.call('HMGET', ARGV[1] .. id, 'id', 'title', 'workspace', 'version',
      'created_ms', 'updated_ms')
    if f[1] then
      for i = 1, 6 do out[#out + 1] = f[i] end
    end
    n = n + 1
    last = id
  end
end
return out
