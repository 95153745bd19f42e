-- Edit one note if it is still where and as the caller read it; every change bumps the version.
-- Safe to run twice: a second run with the same operation id writes nothing, moves no usage
-- count again and returns the first run's result (see op_record.lua, prepended to this script).
-- KEYS: 1 note  2 old title index  3 new title index  4 journal  5 operation record
--       6 tenant usage  7 tenant writes  8 old title's lookalike index  9 new title's
-- ARGV: 1 note id  2 workspace  3 expected version  4 new title  5 new body  6 principal
--       7 journal maxlen  8 operation id  9 operation digest  10 store call id
--       11 operation record TTL ms  12 most bytes the note's owner may hold (0: no limit)
--       13 most writes the principal may make per window  14 the window, ms (charge_write)
-- Returns op_note_reply: status 'updated', 'gone', 'moved', 'changed' (read again and retry;
-- the version field is the current one), 'quota_bytes' (the owner's notes would hold more than
-- ARGV[12]; the version field is what they hold now), 'not_owner' (the principal is not the
-- note's owner and the edit would make it larger: its bytes count against the owner's quota,
-- which nobody else may spend), 'quota_writes' (the principal made ARGV[13] writes this window;
-- the version field is that count), 'lookalike' (a new title that looks like another title of
-- the workspace: the title field names it) or 'conflict' (the operation id names another
-- operation).
-- Nothing written but on 'updated'. The owner's byte count follows the note's size.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = op_recorded(KEYS[5], ARGV[9], ARGV[10])
if rec then return op_note_reply(rec, now) end
local cur = redis.call('HMGET', KEYS[1], 'workspace', 'version', 'created_ms', 'owner', 'title')
if not cur[1] then return op_note_reply({status = 'gone'}, now) end
if cur[1] ~= ARGV[2] then return op_note_reply({status = 'moved'}, now) end
if cur[2] ~= ARGV[3] then
  return op_note_reply({status = 'changed', version = cur[2]}, now)
end
local retitled = cur[5] ~= ARGV[4]
if retitled then
  local other = lookalike_of(KEYS[9], ARGV[4])
  if other then return op_note_reply({status = 'lookalike', title = other}, now) end
end
local owner = cur[4]
local grown = 0
if owner then
  grown = #ARGV[4] + #ARGV[5] - redis.call('HSTRLEN', KEYS[1], 'title')
    - redis.call('HSTRLEN', KEYS[1], 'body')
  if grown > 0 and owner ~= ARGV[6] then
    return op_note_reply({status = 'not_owner'}, now)
  end
  local max_bytes = tonumber(ARGV[12] or '0')
  local bytes = tonumber(redis.call('HGET', KEYS[6], 'b:' .. owner) or '0')
  if max_bytes > 0 and grown > 0 and bytes + grown > max_bytes then
    return op_note_reply({status = 'quota_bytes', version = bytes}, now)
  end
end
local writes = charge_write(KEYS[7], ARGV[6], ARGV[13], ARGV[14], now, false)
if writes then return op_note_reply({status = 'quota_writes', version = writes}, now) end
if owner then redis.call('HINCRBY', KEYS[6], 'b:' .. owner, grown) end
local version = tonumber(cur[2]) + 1
redis.call('HSET', KEYS[1], 'title', ARGV[4], 'body', ARGV[5], 'version', version,
  'updated_ms', now)
if KEYS[2] ~= KEYS[3] then
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[1])
end
if retitled then
  count_title(KEYS[8], cur[5], -1)
  count_title(KEYS[9], ARGV[4], 1)
end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'op', 'update', 'note', ARGV[1],
  'ws', ARGV[2], 'title', ARGV[4], 'version', version, 'principal', ARGV[6], 'opid', ARGV[8],
  'at', now)
local w = {status = 'updated', note = ARGV[1], title = ARGV[4], ws = ARGV[2],
  version = version, created = cur[3] or 0, updated = now}
op_record(KEYS[5], ARGV[9], ARGV[10], ARGV[11], now, w)
return op_note_reply(w, now)
