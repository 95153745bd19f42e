-- Complete one setup link (notes_setup's out-of-band step) at most once, before its expiry.
-- Safe to run twice: a second run with the same operation id (the node re-sending after a lost
-- reply) answers 'completed' again (see op_record.lua, prepended to this script).
-- KEYS: 1 the link's completion record  2 operation record  3 journal
-- ARGV: 1 principal  2 expiry ms (Redis clock)  3 grace ms (how long the record outlives expiry)
--       4 store call id  5 operation record TTL ms  6 the link's nonce  7 journal maxlen
-- A completion is journaled (op 'setup', with principal, nonce and expiry), once.
-- Returns {status, principal recorded, now_ms, replayed}. status:
--   used       the link was completed before (by the principal returned): nothing changes
--   expired    now >= expiry on the Redis clock: nothing written
--   completed  recorded now for ARGV[1] (or by this operation's first run); the record expires
--              at expiry + grace
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = op_recorded(KEYS[2], '', ARGV[4])
if rec then return {rec['status'], rec['who'] or '', now, rec['replayed']} end
local who = redis.call('GET', KEYS[1])
if who then return {'used', who, now, '0'} end
local exp = tonumber(ARGV[2])
if now >= exp then return {'expired', '', now, '0'} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], exp + tonumber(ARGV[3]))
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'op', 'setup', 'note', '',
  'principal', ARGV[1], 'nonce', ARGV[6], 'exp', exp, 'tool', 'notes_setup', 'at', now)
op_record(KEYS[2], '', ARGV[4], ARGV[5], now, {status = 'completed', who = ARGV[1]})
return {'completed', ARGV[1], now, '0'}
