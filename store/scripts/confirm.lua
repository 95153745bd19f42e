-- Decide one confirmation answer atomically. This script is the only place where a sealed
-- confirmation turns into a mutation; its checks are the exactly-once and expiry guarantees.
-- KEYS: 1 replay entry  2 note  3 workspace set  4 title index  5 journal
--       6 target workspace set  7 target title index   (for op 'delete': 3 and 4 again)
--       8 tenant usage  9 workspace usage  10 target workspace usage (for 'delete': 9 again)
--       13 tenant writes
--       11 lookalike index of (workspace, title)  12 the target's (for 'delete': 11 again); an
--          archive is not refused for a lookalike there (the person confirmed it), only counted
-- ARGV: 1 action (accept|decline|cancel)  2 answer digest  3 expiry ms (Redis clock)
--       4 replay grace ms  5 note id  6 expected version  7 workspace  8 principal  9 nonce
--       10 op (delete|move)  11 target workspace  12 journal maxlen  13 tool
--       14 '1' when the node waits for replicas (WAIT) before answering: a replay then rewrites
--          the entry's expiry (same value), so the WAIT that follows covers the recorded outcome
--       15 most notes the target workspace may hold, for op 'move' (0: no limit)
--       16 store call id: a run with the call id recorded under the nonce is the node's own
--          re-send after a lost reply, and gets the first run's status back (executed or
--          declined), not 'replay'. So the script is safe to run twice: the usage counts
--          move only in the run that records the answer, never in a replay.
--       17 most notes the note's owner may own in the target, for op 'move' (0: no limit)
--       18 most writes the principal may make per window  19 the window, ms (charge_write in
--          op_record.lua, prepended to this script for it): a decline and an accepted move
--          record an entry, so each is a write (a delete is not: it frees what a charged create
--          made); past the bound nothing is written and the state stays usable
-- Returns {status, recorded outcome, now_ms}; the recorded outcome ('deleted:<id>', 'moved:<id>',
-- 'declined' or '') is read in one place, store/notes.py's parse_confirm_reply. status:
--   replay    same answer seen before: recorded outcome returned again, nothing changes
--   conflict  a different answer was already recorded for this state: refused
--   expired   now >= expiry on the Redis clock: refused
--   cancelled answer was cancel: nothing written, the state stays usable
--   declined  recorded as terminal, nothing mutated
--   gone / moved / changed   the note is deleted, outside the workspace, or edited since shown
--   full      op 'move' and the target workspace holds its limit (recorded outcome ''), or the
--             note's owner owns ARGV[17] notes there (recorded outcome 'share'), or the principal
--             made ARGV[18] writes this window (recorded outcome 'writes'): nothing written
--   executed  the mutation happened and its outcome is recorded under the nonce
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'answer', 'outcome', 'call')
if rec[1] then
  if rec[1] == ARGV[2] then
    if ARGV[14] == '1' then
      redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]))
    end
    if ARGV[16] and ARGV[16] ~= '' and rec[3] == ARGV[16] then
      if rec[2] == 'declined' then return {'declined', rec[2], now} end
      return {'executed', rec[2], now}
    end
    return {'replay', rec[2], now}
  end
  return {'conflict', rec[2], now}
end
local exp = tonumber(ARGV[3])
if now >= exp then return {'expired', '', now} end
if ARGV[1] == 'cancel' then return {'cancelled', '', now} end
local keep_until = exp + tonumber(ARGV[4])
if ARGV[1] == 'decline' then
  if charge_write(KEYS[13], ARGV[8], ARGV[18], ARGV[19], now, false) then
    return {'full', 'writes', now}
  end
  redis.call('HSET', KEYS[1], 'answer', ARGV[2], 'outcome', 'declined', 'at', now,
    'call', ARGV[16] or '')
  redis.call('PEXPIREAT', KEYS[1], keep_until)
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[12], '*', 'op', 'decline', 'note', '',
    'ws', ARGV[7], 'principal', ARGV[8], 'nonce', ARGV[9], 'exp', exp, 'tool', ARGV[13],
    'at', now)
  return {'declined', 'declined', now}
end
local cur = redis.call('HMGET', KEYS[2], 'workspace', 'version', 'title', 'owner')
if not cur[1] then return {'gone', '', now} end
if cur[1] ~= ARGV[7] then return {'moved', '', now} end
if cur[2] ~= ARGV[6] then return {'changed', '', now} end
if ARGV[10] == 'move' then
  local limit = tonumber(ARGV[15] or '0')
  if limit > 0 and redis.call('SCARD', KEYS[6]) >= limit then return {'full', '', now} end
  local share = tonumber(ARGV[17] or '0')
  if cur[4] and share > 0 and tonumber(redis.call('HGET', KEYS[10], cur[4]) or '0') >= share then
    return {'full', 'share', now}
  end
  -- An archive is a write; a delete is not charged: it frees what a charged create made.
  if charge_write(KEYS[13], ARGV[8], ARGV[18], ARGV[19], now, false) then
    return {'full', 'writes', now}
  end
end
local outcome
if ARGV[10] == 'move' then
  local version = tonumber(cur[2]) + 1
  redis.call('HSET', KEYS[2], 'workspace', ARGV[11], 'version', version, 'updated_ms', now)
  redis.call('SREM', KEYS[3], ARGV[5])
  redis.call('SREM', KEYS[4], ARGV[5])
  redis.call('SADD', KEYS[6], ARGV[5])
  redis.call('SADD', KEYS[7], ARGV[5])
  if redis.call('HINCRBY', KEYS[11], cur[3], -1) <= 0 then redis.call('HDEL', KEYS[11], cur[3]) end
  redis.call('HINCRBY', KEYS[12], cur[3], 1)
  if cur[4] then
    if redis.call('HINCRBY', KEYS[9], cur[4], -1) <= 0 then redis.call('HDEL', KEYS[9], cur[4]) end
    redis.call('HINCRBY', KEYS[10], cur[4], 1)
  end
  outcome = 'moved:' .. ARGV[5]
else
  local size = cur[4] and redis.call('HSTRLEN', KEYS[2], 'title')
    + redis.call('HSTRLEN', KEYS[2], 'body')
  redis.call('DEL', KEYS[2])
  redis.call('SREM', KEYS[3], ARGV[5])
  redis.call('SREM', KEYS[4], ARGV[5])
  if redis.call('HINCRBY', KEYS[11], cur[3], -1) <= 0 then redis.call('HDEL', KEYS[11], cur[3]) end
  if cur[4] then  -- the owner's counts; a count that reaches 0 leaves no field behind
    if redis.call('HINCRBY', KEYS[8], 'n:' .. cur[4], -1) <= 0 then
      redis.call('HDEL', KEYS[8], 'n:' .. cur[4], 'b:' .. cur[4])
    else
      redis.call('HINCRBY', KEYS[8], 'b:' .. cur[4], -size)
    end
    if redis.call('HINCRBY', KEYS[9], cur[4], -1) <= 0 then redis.call('HDEL', KEYS[9], cur[4]) end
  end
  outcome = 'deleted:' .. ARGV[5]
end
redis.call('HSET', KEYS[1], 'answer', ARGV[2], 'outcome', outcome, 'at', now,
  'call', ARGV[16] or '')
redis.call('PEXPIREAT', KEYS[1], keep_until)
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[12], '*', 'op', ARGV[10], 'note', ARGV[5],
  'ws', ARGV[7], 'to', ARGV[11], 'title', cur[3], 'version', cur[2], 'principal', ARGV[8],
  'nonce', ARGV[9], 'exp', exp, 'tool', ARGV[13], 'at', now)
return {'executed', outcome, now}
