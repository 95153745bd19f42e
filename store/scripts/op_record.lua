-- Operation records: what makes a write script safe to run twice. Prepended by store/notes.py to
-- every script that writes notes or setup completions (create, update, move, setup); not a
-- script of its own. A write is recorded under its operation id in the same atomic step as the
-- write itself, so a second run with that id (the node re-sending after a lost reply, or a
-- client retrying with the same idempotency key) writes nothing and returns the first run's
-- result.
-- The record <base>:op:<opId> is a hash: 'digest' (what the operation does: a digest of tool and
-- arguments for an idempotency key, '' otherwise), 'call' (the store call that wrote it), 'until'
-- (its expiry, ms on the Redis clock) and the script's own result fields.

-- The record under KEYS 'key' as a field table, or nil. 'status' is 'conflict' when it was
-- recorded with another digest. Otherwise its expiry is written again (the same value): a write,
-- so a WAIT that follows this script covers the record it answers from. 'replayed' is '1' when
-- another store call wrote it (a later request), '0' for this call's own re-send.
local function op_recorded(key, digest, call)
  local r = redis.call('HGETALL', key)
  if #r == 0 then return nil end
  local f = {}
  for i = 1, #r, 2 do f[r[i]] = r[i + 1] end
  if f['digest'] ~= digest then
    f['status'] = 'conflict'
    return f
  end
  redis.call('PEXPIREAT', key, f['until'])
  if f['call'] == call then f['replayed'] = '0' else f['replayed'] = '1' end
  return f
end

-- Record a write under 'key' for 'ttl' ms from 'now' (Redis clock). 'f' holds the script's
-- result fields by name.
local function op_record(key, digest, call, ttl, now, f)
  local until_ms = now + tonumber(ttl)
  local flat = {'digest', digest, 'call', call, 'until', until_ms}
  for name, value in pairs(f) do
    flat[#flat + 1] = name
    flat[#flat + 1] = value
  end
  redis.call('HSET', key, unpack(flat))
  redis.call('PEXPIREAT', key, until_ms)
end

-- The reply of a note write: {status, note id, title, workspace, version, created_ms,
-- updated_ms, now_ms, replayed}, the numbers as integers whether they come from this run or
-- from a record; store/notes.py's parse_write_reply reads it.
local function op_note_reply(f, now)
  return {f['status'], f['note'] or '', f['title'] or '', f['ws'] or '',
    tonumber(f['version'] or 0), tonumber(f['created'] or 0), tonumber(f['updated'] or 0), now,
    f['replayed'] or '0'}
end

-- Charge one write to principal 'who' in the tenant's writes hash 'key' (fields w:<who>, the writes
-- of its current window, and we:<who>, when that window ends, ms on the Redis clock): at most
-- 'limit' writes per window of 'window' ms ('0' or '': no bound). Returns nil when the write may
-- go ahead (charged, unless 'check_only'), else the count already made in the window. Every
-- write leaves an operation record that lives one window at most, so a principal holds at most
-- twice 'limit' of them (this window's and the last one's).
local function charge_write(key, who, limit, window, now, check_only)
  local most = tonumber(limit or '0') or 0
  if most <= 0 then return nil end
  local f = redis.call('HMGET', key, 'w:' .. who, 'we:' .. who)
  local n, ends = tonumber(f[1] or '0'), tonumber(f[2] or '0')
  if now >= ends then
    n = 0
    ends = now + tonumber(window)
  end
  if n >= most then return n end
  if not check_only then
    redis.call('HSET', key, 'w:' .. who, n + 1, 'we:' .. who, ends)
    -- Every window in the hash ends within one window of its latest write: it outlives none.
    redis.call('PEXPIREAT', key, now + tonumber(window))
  end
  return nil
end

-- The lookalike index (store/skeletons.py): the hash 'key' holds the titles of one workspace
-- that share one UTS #39 skeleton, each with its count of notes. A title different from one
-- already there looks like it: the other title is returned (nil: none).
local function lookalike_of(key, title)
  for _, other in ipairs(redis.call('HKEYS', key)) do
    if other ~= title then return other end
  end
  return nil
end

-- Count 'n' (1 or -1) notes of 'title' in the lookalike index 'key'; a count that reaches 0
-- leaves no field behind.
local function count_title(key, title, n)
  if redis.call('HINCRBY', key, title, n) <= 0 then redis.call('HDEL', key, title) end
end
