-- Edit one note if it is still where and as the caller read it; every change bumps the version.
-- Safe to run twice: a second run with the same operation id writes nothing and returns the
-- first run's result (see op_record.lua, prepended to this script).
-- KEYS: 1 note  2 old title index  3 new title index  4 journal  5 operation record
-- ARGV: 1 note id  2 workspace  3 expected version  4 new title  5 new body  6 principal
--       7 journal maxlen  8 operation id  9 operation digest  10 store call id
--       11 operation record TTL ms
-- Returns op_note_reply: status 'updated', 'gone', 'moved', 'changed' (read again and retry;
-- the version field is the current one) or 'conflict' (the operation id names another
-- operation; nothing written).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = op_recorded(KEYS[5], ARGV[9], ARGV[10])
if rec then return op_note_reply(rec, now) end
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version', 'created_ms')
if not cur[1] then return op_note_reply({status = 'gone'}, now) end
if cur[1] ~= ARGV[2] then return op_note_reply({status = 'moved'}, now) end
if cur[2] ~= ARGV[3] then
  return op_note_reply({status = 'changed', version = cur[2]}, now)
end
local version = tonumber(cur[2]) + 1
redis.call('HSET', KEYS[1], 'title', ARGV[4], 'body', ARGV[5], 'version', version,
  'updated_ms', now)
if KEYS[2] ~= KEYS[3] then
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[1])
end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'op', 'update', 'note', ARGV[1],
  'ws', ARGV[2], 'title', ARGV[4], 'version', version, 'principal', ARGV[6], 'opid', ARGV[8],
  'at', now)
local w = {status = 'updated', note = ARGV[1], title = ARGV[4], ws = ARGV[2],
  version = version, created = cur[3] or 0, updated = now}
op_record(KEYS[5], ARGV[9], ARGV[10], ARGV[11], now, w)
return op_note_reply(w, now)
