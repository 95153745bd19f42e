-- Move one note to another workspace of the same tenant; bumps the version.
-- KEYS: 1 note  2 source workspace set  3 target workspace set  4 source title index
--       5 target title index  6 journal  7 source workspace usage  8 target workspace usage
-- ARGV: 1 note id  2 source workspace  3 target workspace  4 principal  5 journal maxlen
--       6 most notes the target workspace may hold (0: no limit)
--       7 most notes the note's owner may own in the target (0: no limit)
-- Returns {status, version, now_ms}; status 'moved', 'gone', 'elsewhere' (not in the source),
-- 'full' (the target holds its limit) or 'quota_share' (the owner owns ARGV[7] notes there; the
-- second item is that count); nothing written but on 'moved'.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version', 'title', 'owner')
if not cur[1] then return {'gone', 0, now} end
if cur[1] ~= ARGV[2] then return {'elsewhere', 0, now} end
local limit = tonumber(ARGV[6] or '0')
if limit > 0 and redis.call('SCARD', KEYS[3]) >= limit then return {'full', 0, now} end
local owner = cur[4]
if owner then
  local share = tonumber(ARGV[7] or '0')
  local there = tonumber(redis.call('HGET', KEYS[8], owner) or '0')
  if share > 0 and there >= share then return {'quota_share', there, now} end
  if redis.call('HINCRBY', KEYS[7], owner, -1) <= 0 then redis.call('HDEL', KEYS[7], owner) end
  redis.call('HINCRBY', KEYS[8], owner, 1)
end
local version = tonumber(cur[2]) + 1
redis.call('HSET', KEYS[1], 'workspace', ARGV[3], 'version', version, 'updated_ms', now)
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'op', 'move', 'note', ARGV[1],
  'ws', ARGV[2], 'to', ARGV[3], 'title', cur[3], 'version', version, 'principal', ARGV[4],
  'at', now)
return {'moved', version, now}
