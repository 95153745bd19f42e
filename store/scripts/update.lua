-- Edit one note if it is still where and as the caller read it; every change bumps the version.
-- KEYS: 1 note  2 old title index  3 new title index  4 journal
-- ARGV: 1 note id  2 workspace  3 expected version  4 new title  5 new body  6 principal
--       7 journal maxlen
-- Returns {status, version, now_ms}; status 'updated', 'gone', 'moved' or 'changed' (retry).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version')
if not cur[1] then return {'gone', 0, now} end
if cur[1] ~= ARGV[2] then return {'moved', 0, now} end
if cur[2] ~= ARGV[3] then return {'changed', tonumber(cur[2]), now} end
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
