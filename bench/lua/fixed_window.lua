-- Fixed window counter in Lua: the baseline for RL.FIXED.
--
-- Idea (both seed articles): one counter per key; admit while count + cost <= limit; the
-- counter's expiry ends the window. This is the common GET / INCRBY / PEXPIRE form: the
-- window starts at the first admitted call and lasts `window` seconds (not aligned to the
-- clock), so the script needs no TIME call at all.
--
-- KEYS[1] the counter   ARGV: limit, window (seconds), [cost = 1]
-- Reply, shaped like the RL commands': {allowed, remaining, retry_after_ms, reset_after_ms, limit}
--
-- How it differs from RL.FIXED: the window follows the key's TTL (PTTL is read back to
-- report reset_after_ms), a denied call writes nothing, no argument validation. It has the
-- algorithm's known flaw: up to 2 x limit calls around a window boundary.

local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3]) or 1

local used = tonumber(redis.call('GET', KEYS[1])) or 0
if used + cost > limit then
  local ttl_ms = math.max(1, redis.call('PTTL', KEYS[1]))
  local retry_ms = ttl_ms
  if cost > limit then
    retry_ms = -1
  end
  return {0, math.max(0, limit - used), retry_ms, ttl_ms, limit}
end

used = redis.call('INCRBY', KEYS[1], cost)
local ttl_ms = window_ms
if used == cost then
  redis.call('PEXPIRE', KEYS[1], window_ms)
else
  ttl_ms = redis.call('PTTL', KEYS[1])
end
return {1, limit - used, 0, ttl_ms, limit}
