-- Create one note: record, workspace set, title index, journal, the owner's usage counts and
-- operation record in one step.
-- Safe to run twice: a second run with the same operation id writes nothing, charges no quota
-- again and returns the first run's note (see op_record.lua, prepended to this script).
-- KEYS: 1 note  2 workspace set  3 title index  4 journal  5 operation record  6 tenant usage
--       7 workspace usage  8 tenant writes  9 lookalike index of (workspace, title)
-- ARGV: 1 note id  2 title  3 body  4 workspace  5 principal  6 journal maxlen
--       7 created ms (0: now; a seeding tool may backdate a note)
--       8 most notes the workspace may hold (0: no limit); the workspace set's size is the count
--       9 operation id  10 operation digest  11 store call id  12 operation record TTL ms
--       13 most notes the principal may own in the tenant  14 most bytes (title + body) they
--       may hold  15 most notes they may own in this workspace (each 0: no limit)
--       16 most writes the principal may make per window  17 the window, ms (charge_write)
-- Returns op_note_reply: status 'created', 'exists' (id collision), 'full' (the workspace
-- already holds its limit), 'quota_notes' / 'quota_bytes' / 'quota_share' / 'quota_writes' (the
-- principal's quota; the version field is what they hold now) or 'conflict' (the operation id names another
-- operation), or 'lookalike' (the workspace holds a different title that looks like this one, UTS
-- #39 skeleton: the title field names it). Nothing written but on 'created'. The principal owns the note: its usage counts
-- it (store/keys.py).
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
local other = lookalike_of(KEYS[9], ARGV[2])
if other then return op_note_reply({status = 'lookalike', title = other}, now) end
local owner, size = ARGV[5], #ARGV[2] + #ARGV[3]
local used = redis.call('HMGET', KEYS[6], 'n:' .. owner, 'b:' .. owner)
local notes, bytes = tonumber(used[1] or '0'), tonumber(used[2] or '0')
local max_notes, max_bytes = tonumber(ARGV[13] or '0'), tonumber(ARGV[14] or '0')
if max_notes > 0 and notes >= max_notes then
  return op_note_reply({status = 'quota_notes', version = notes}, now)
end
if max_bytes > 0 and bytes + size > max_bytes then
  return op_note_reply({status = 'quota_bytes', version = bytes}, now)
end
local share = tonumber(ARGV[15] or '0')
local here = tonumber(redis.call('HGET', KEYS[7], owner) or '0')
if share > 0 and here >= share then
  return op_note_reply({status = 'quota_share', version = here}, now)
end
local writes = charge_write(KEYS[8], owner, ARGV[16], ARGV[17], now, false)
if writes then return op_note_reply({status = 'quota_writes', version = writes}, now) end
local created = tonumber(ARGV[7])
if created == 0 then created = now end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'title', ARGV[2], 'body', ARGV[3],
  'workspace', ARGV[4], 'version', 1, 'created_ms', created, 'updated_ms', created,
  'owner', owner)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
count_title(KEYS[9], ARGV[2], 1)
redis.call('HINCRBY', KEYS[6], 'n:' .. owner, 1)
redis.call('HINCRBY', KEYS[6], 'b:' .. owner, size)
redis.call('HINCRBY', KEYS[7], owner, 1)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'op', 'create', 'note', ARGV[1],
  'ws', ARGV[4], 'title', ARGV[2], 'version', 1, 'principal', ARGV[5], 'opid', ARGV[9],
  'at', now)
local w = {status = 'created', note = ARGV[1], title = ARGV[2], ws = ARGV[4], version = 1,
  created = created, updated = created}
op_record(KEYS[5], ARGV[10], ARGV[11], ARGV[12], now, w)
return op_note_reply(w, now)
