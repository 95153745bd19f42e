-- The record of a write under its operation id, for a retry's replay (store/notes.py
-- NoteStore._record): the fields named in ARGV (nil where absent), or an empty array when there
-- is no record. A record found gets its expiry written again (the same value): a write, so the
-- WAIT that follows this script (wait_replicas) covers the record, and a write of unknown
-- outcome (run on the master, not yet on a replica) is never answered as done by its replay.
-- KEYS: <base>:op:<opId>.  ARGV: field names.
local key = KEYS[1]
local until_ms = redis.call('HGET', key, 'until')
if not until_ms then return {} end
redis.call('PEXPIREAT', key, until_ms)
return redis.call('HMGET', key, unpack(ARGV))
