-- Create one note: record, workspace set, title index and journal in one step.
-- KEYS: 1 note  2 workspace set  3 title index  4 journal  5 tenant usage  6 workspace usage
-- ARGV: 1 note id  2 title  3 body  4 workspace  5 principal  6 journal maxlen
--       7 created ms (0: now; a seeding tool may backdate a note)
--       8 most notes the workspace may hold (0: no limit); the workspace set's size is the count
--       9 most notes the principal may own in the tenant  10 most bytes (title + body) they may
--       hold  11 most notes they may own in this workspace (each 0: no limit)
-- Returns {status, version, created_ms}; status 'created', 'exists' (id collision), 'full'
-- (the workspace already holds its limit) or 'quota_notes' / 'quota_bytes' / 'quota_share'
-- (the principal's quota; the second item is what they hold now). Nothing written but on
-- 'created'. The principal owns the note: its usage counts it (store/keys.py).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists', 0, now}
end
local limit = tonumber(ARGV[8] or '0')
if limit > 0 and redis.call('SCARD', KEYS[2]) >= limit then
  return {'full', 0, now}
end
local owner, size = ARGV[5], #ARGV[2] + #ARGV[3]
local used = redis.call('HMGET', KEYS[5], 'n:' .. owner, 'b:' .. owner)
local notes, bytes = tonumber(used[1] or '0'), tonumber(used[2] or '0')
local max_notes, max_bytes = tonumber(ARGV[9] or '0'), tonumber(ARGV[10] or '0')
if max_notes > 0 and notes >= max_notes then return {'quota_notes', notes, now} end
if max_bytes > 0 and bytes + size > max_bytes then return {'quota_bytes', bytes, now} end
local share = tonumber(ARGV[11] or '0')
local here = tonumber(redis.call('HGET', KEYS[6], owner) or '0')
if share > 0 and here >= share then return {'quota_share', here, now} end
local created = tonumber(ARGV[7])
if created == 0 then created = now end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'title', ARGV[2], 'body', ARGV[3],
  'workspace', ARGV[4], 'version', 1, 'created_ms', created, 'updated_ms', created,
  'owner', owner)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[5], 'n:' .. owner, 1)
redis.call('HINCRBY', KEYS[5], 'b:' .. owner, size)
redis.call('HINCRBY', KEYS[6], owner, 1)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'op', 'create', 'note', ARGV[1],
  'ws', ARGV[4], 'title', ARGV[2], 'version', 1, 'principal', ARGV[5], 'at', now)
return {'created', 1, created}
