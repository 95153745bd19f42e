-- Move one note to another workspace of the same tenant; bumps the version.
-- Safe to run twice: a second run with the same operation id writes nothing and returns the
-- first run's result (see op_record.lua, prepended to this script).
-- KEYS: 1 note  2 source workspace set  3 target workspace set  4 source title index
--       5 target title index  6 journal  7 operation record
-- ARGV: 1 note id  2 source workspace  3 target workspace  4 principal  5 journal maxlen
--       6 most notes the target workspace may hold (0: no limit)
--       7 operation id  8 operation digest  9 store call id  10 operation record TTL ms
-- Returns op_note_reply: status 'moved', 'gone', 'elsewhere' (not in the source), 'full' (the
-- target holds its limit; nothing written) or 'conflict' (the operation id names another
-- operation; nothing written).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = op_recorded(KEYS[7], ARGV[8], ARGV[9])
if rec then return op_note_reply(rec, now) end
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version', 'title', 'created_ms')
if not cur[1] then return op_note_reply({status = 'gone'}, now) end
if cur[1] ~= ARGV[2] then return op_note_reply({status = 'elsewhere'}, now) end
local limit = tonumber(ARGV[6] or '0')
if limit > 0 and redis.call('SCARD', KEYS[3]) >= limit then
  return op_note_reply({status = 'full'}, now)
end
local version = tonumber(cur[2]) + 1
redis.call('HSET', KEYS[1], 'workspace', ARGV[3], 'version', version, 'updated_ms', now)
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'op', 'move', 'note', ARGV[1],
  'ws', ARGV[2], 'to', ARGV[3], 'title', cur[3], 'version', version, 'principal', ARGV[4],
  'opid', ARGV[7], 'at', now)
local w = {status = 'moved', note = ARGV[1], title = cur[3], ws = ARGV[3], version = version,
  created = cur[4] or 0, updated = now}
op_record(KEYS[7], ARGV[8], ARGV[9], ARGV[10], now, w)
return op_note_reply(w, now)
