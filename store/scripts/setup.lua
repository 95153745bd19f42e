-- Complete one setup link (notes_setup's out-of-band step) at most once, before its expiry.
-- KEYS: 1 the link's completion record
-- ARGV: 1 principal  2 expiry ms (Redis clock)  3 grace ms (how long the record outlives expiry)
-- Returns {status, principal recorded, now_ms}. status:
--   used       the link was completed before (by the principal returned): nothing changes
--   expired    now >= expiry on the Redis clock: nothing written
--   completed  recorded now for ARGV[1]; the record expires at expiry + grace
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local who = redis.call('GET', KEYS[1])
if who then return {'used', who, now} end
local exp = tonumber(ARGV[2])
if now >= exp then return {'expired', '', now} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], exp + tonumber(ARGV[3]))
return {'completed', ARGV[1], now}
