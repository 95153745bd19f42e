-- Create one note: record, workspace set, title index, journal and operation record in one step.
-- Safe to run twice: a second run with the same operation id writes nothing and returns the
-- first run's note (see op_record.lua, prepended to this script).
-- KEYS: 1 note  2 workspace set  3 title index  4 journal  5 operation record
-- ARGV: 1 note id  2 title  3 body  4 workspace  5 principal  6 journal maxlen
--       7 created ms (0: now; a seeding tool may backdate a note)
--       8 most notes the workspace may hold (0: no limit); the workspace set's size is the count
--       9 operation id  10 operation digest  11 store call id  12 operation record TTL ms
-- Returns op_note_reply: status 'created', 'exists' (id collision), 'full' (the workspace
-- already holds its limit; nothing written) or 'conflict' (the operation id names another
-- operation; nothing written).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = op_recorded(KEYS[5], ARGV[10], ARGV[11])
if rec then return op_note_reply(rec, now) end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return op_note_reply({status = 'exists'}, now)
end
local limit = tonumber(ARGV[8] or '0')
if limit > 0 and redis.call('SCARD', KEYS[2]) >= limit then
  return op_note_reply({status = 'full'}, now)
end
local created = tonumber(ARGV[7])
if created == 0 then created = now end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'title', ARGV[2], 'body', ARGV[3],
  'workspace', ARGV[4], 'version', 1, 'created_ms', created, 'updated_ms', created)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'op', 'create', 'note', ARGV[1],
  'ws', ARGV[4], 'title', ARGV[2], 'version', 1, 'principal', ARGV[5], 'opid', ARGV[9],
  'at', now)
local w = {status = 'created', note = ARGV[1], title = ARGV[2], ws = ARGV[4], version = 1,
  created = created, updated = created}
op_record(KEYS[5], ARGV[10], ARGV[11], ARGV[12], now, w)
return op_note_reply(w, now)
