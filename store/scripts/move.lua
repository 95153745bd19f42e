-- Move one note to another workspace of the same tenant; bumps the version.
-- Safe to run twice: a second run with the same operation id writes nothing, moves no usage
-- count again and returns the first run's result (see op_record.lua, prepended to this script).
-- KEYS: 1 note  2 source workspace set  3 target workspace set  4 source title index
--       5 target title index  6 journal  7 operation record  8 source workspace usage
--       9 target workspace usage  10 tenant writes  11 source lookalike index
--       12 target lookalike index (of the note's title)
-- ARGV: 1 note id  2 source workspace  3 target workspace  4 principal  5 journal maxlen
--       6 most notes the target workspace may hold (0: no limit)
--       7 operation id  8 operation digest  9 store call id  10 operation record TTL ms
--       11 most notes the note's owner may own in the target (0: no limit)
--       12 most writes the principal may make per window  13 the window, ms (charge_write)
--       14 the principals who may reach the target workspace, each between newlines ('': no
--          check): a note whose owner is not among them is not moved there by another
--          principal, or its owner could neither list nor delete what still counts as theirs
-- Returns op_note_reply: status 'moved', 'gone', 'elsewhere' (not in the source), 'full' (the
-- target holds its limit), 'quota_share' (the owner owns ARGV[11] notes there; the version
-- field is that count), 'unreachable' (ARGV[14]: the owner could not reach it there),
-- 'quota_writes' (the principal made ARGV[12] writes this window; the version field is that
-- count), 'lookalike' (the target holds a different title that looks like the note's: the
-- title field names it) or 'conflict' (the operation id names another operation). Nothing written but on
-- 'moved'.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = op_recorded(KEYS[7], ARGV[8], ARGV[9])
if rec then return op_note_reply(rec, now) end
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version', 'title', 'created_ms', 'owner')
if not cur[1] then return op_note_reply({status = 'gone'}, now) end
if cur[1] ~= ARGV[2] then return op_note_reply({status = 'elsewhere'}, now) end
local limit = tonumber(ARGV[6] or '0')
if limit > 0 and redis.call('SCARD', KEYS[3]) >= limit then
  return op_note_reply({status = 'full'}, now)
end
local other = lookalike_of(KEYS[12], cur[3])
if other then return op_note_reply({status = 'lookalike', title = other}, now) end
local owner = cur[5]
local reach = ARGV[14] or ''
if owner and owner ~= ARGV[4] and reach ~= '' and not reach:find('\n' .. owner .. '\n', 1, true) then
  return op_note_reply({status = 'unreachable'}, now)
end
if owner then
  local share = tonumber(ARGV[11] or '0')
  local there = tonumber(redis.call('HGET', KEYS[9], owner) or '0')
  if share > 0 and there >= share then
    return op_note_reply({status = 'quota_share', version = there}, now)
  end
end
local writes = charge_write(KEYS[10], ARGV[4], ARGV[12], ARGV[13], now, false)
if writes then return op_note_reply({status = 'quota_writes', version = writes}, now) end
if owner then
  if redis.call('HINCRBY', KEYS[8], owner, -1) <= 0 then redis.call('HDEL', KEYS[8], owner) end
  redis.call('HINCRBY', KEYS[9], owner, 1)
end
local version = tonumber(cur[2]) + 1
redis.call('HSET', KEYS[1], 'workspace', ARGV[3], 'version', version, 'updated_ms', now)
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
count_title(KEYS[11], cur[3], -1)
count_title(KEYS[12], cur[3], 1)
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'op', 'move', 'note', ARGV[1],
  'ws', ARGV[2], 'to', ARGV[3], 'title', cur[3], 'version', version, 'principal', ARGV[4],
  'opid', ARGV[7], 'at', now)
local w = {status = 'moved', note = ARGV[1], title = cur[3], ws = ARGV[3], version = version,
  created = cur[4] or 0, updated = now}
op_record(KEYS[7], ARGV[8], ARGV[9], ARGV[10], now, w)
return op_note_reply(w, now)
