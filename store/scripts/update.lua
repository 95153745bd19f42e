-- Edit one note if it is still where and as the caller read it; every change bumps the version.
-- KEYS: 1 note  2 old title index  3 new title index  4 journal  5 tenant usage
-- ARGV: 1 note id  2 workspace  3 expected version  4 new title  5 new body  6 principal
--       7 journal maxlen  8 most bytes the note's owner may hold (0: no limit)
-- Returns {status, version, now_ms}; status 'updated', 'gone', 'moved', 'changed' (retry) or
-- 'quota_bytes' (the owner's notes would hold more than ARGV[8]; the second item is what they
-- hold now). The owner's byte count follows the note's size.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version', 'owner')
if not cur[1] then return {'gone', 0, now} end
if cur[1] ~= ARGV[2] then return {'moved', 0, now} end
if cur[2] ~= ARGV[3] then return {'changed', tonumber(cur[2]), now} end
local owner = cur[3]
local grown = #ARGV[4] + #ARGV[5] - redis.call('HSTRLEN', KEYS[1], 'title')
  - redis.call('HSTRLEN', KEYS[1], 'body')
if owner then
  local max_bytes = tonumber(ARGV[8] or '0')
  local bytes = tonumber(redis.call('HGET', KEYS[5], 'b:' .. owner) or '0')
  if max_bytes > 0 and grown > 0 and bytes + grown > max_bytes then
    return {'quota_bytes', bytes, now}
  end
  redis.call('HINCRBY', KEYS[5], 'b:' .. owner, grown)
end
local version = tonumber(cur[2]) + 1
redis.call('HSET', KEYS[1], 'title', ARGV[4], 'body', ARGV[5], 'version', version,
  'updated_ms', now)
if KEYS[2] ~= KEYS[3] then
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[1])
end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'op', 'update', 'note', ARGV[1],
  'ws', ARGV[2], 'title', ARGV[4], 'version', version, 'principal', ARGV[6], 'at', now)
return {'updated', version, now}
